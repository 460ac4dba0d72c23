"""An fp32 result read only for its order (see :mod:`.fate`): ``score = h + w * t`` with
``t`` fp32 is fp32, but when ``score`` is read only by ``argmax``, ``argmin`` or
``argsort`` (or compared), no fp32 value reaches a half op or the output: the indices
picked are what the model uses. ``topk`` and ``sort`` hand the values back too, so a
result read by them, or by anything else, keeps the meeting a leak.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted

_ORDER = frozenset({"argmax", "argmin", "argsort"})


def order_only(ctx: Context, result: ast.AST) -> bool:
    """Whether the value of ``result`` (where an fp32 tensor met half values) is read only
    through ``argmax``/``argmin``/``argsort`` or a comparison: directly, or through the one
    name it is bound to."""
    parent = ctx.parents.get(id(result))
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = parent.targets[0]
        if not isinstance(target, ast.Name):
            return False
        uses = ctx.uses_after(target.id, parent)
        loads = [u for u in uses if isinstance(u.ctx, ast.Load)]
        return bool(loads) and len(loads) == len(uses) and all(_orders(ctx, u) for u in loads)
    return _orders(ctx, result)


def _orders(ctx: Context, node: ast.AST) -> bool:
    """``torch.argmax(node, ...)``, ``node.argsort(...)`` or ``node > v``."""
    parent = ctx.parents.get(id(node))
    if isinstance(parent, ast.Compare):
        return True
    if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
        name = dotted(parent.func).rsplit(".", 1)[-1]
        return name in _ORDER and dotted(parent.func).split(".")[0] in ctx.imports.torch
    if isinstance(parent, ast.Attribute) and parent.attr in _ORDER:
        call = ctx.parents.get(id(parent))
        return isinstance(call, ast.Call) and call.func is parent
    return False
