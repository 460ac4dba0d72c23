"""A tensor given to a lambda bound to a name of the walked function (``ease = lambda t:
3 * t**2``, then ``ease(grid)``): the lambda's body takes it through its parameter, and
what the body makes goes back out of every call of the name (see :mod:`.fate`, where a
lambda's body carries its value to the calls as a thunk does).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.reach import Follow


def lambda_step(f: Follow, node: ast.AST, call: ast.Call) -> str | None:
    """``"done"`` once ``node``, a positional argument of a call of a named lambda, is
    followed through the lambda's body; None when ``call`` calls no such lambda."""
    func = call.func
    lam = f.ctx.binding_before(func) if isinstance(func, ast.Name) else None
    if not isinstance(lam, ast.Lambda) or node not in call.args:
        return None
    params = [*lam.args.posonlyargs, *lam.args.args]
    at = call.args.index(node)
    if any(isinstance(a, ast.Starred) for a in call.args[: at + 1]) or at >= len(params):
        return "unknown"
    name = params[at].arg
    f.names.add(name)
    for use in walk(lam.body):
        if isinstance(use, ast.Name) and use.id == name and isinstance(use.ctx, ast.Load):
            f.climb(use)
            if f.fate.leaks:
                break
    return "done"
