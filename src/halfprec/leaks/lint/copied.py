"""``torch.tensor(x)`` of a parameter ``x`` that every call of its function in the file
passes a floating tensor (``self._transform(feats)``): a copy of that tensor in its own
dtype (torch keeps a tensor's dtype there), not integer data made fp32 (see
:mod:`.factories`).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.callers import argument_for
from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.values import value_of


def copies_tensor(call: ast.Call, ctx: Context) -> bool:
    """Whether ``call`` (``torch.tensor(x)``) copies a parameter ``x``, never rebound
    before it, that each call of the function in the file passes a floating tensor."""
    fn, calls = ctx.function, ctx.calls
    data = call.args[0] if len(call.args) == 1 and not call.keywords else None
    if not isinstance(data, ast.Name) or calls is None or ctx.binding_before(data) is not None:
        return False
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    param = next((p for p in params if p.arg == data.id), None)
    if param is None or param is params[0] and param.arg in ("self", "cls"):
        return False
    sites = calls.callers(fn)
    method = calls.program.owner_of(fn) is not None
    for site in sites:
        arg = argument_for(fn, site.call, param, method=method)
        if arg is None:
            return False
        held = calls.context(site.caller, site.facts, site.is_forward)
        if value_of(arg, held.at(arg)) is None:
            return False
    return bool(sites)
