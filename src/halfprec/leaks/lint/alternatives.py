"""A factory's tensor made as the alternative to fp32 the library asks for: the lead's
ruling (b) (docs/leaks.md, "fp32 the library asks for") where the two meet in one name.

``m = mask.float() if mask is not None else torch.ones(b, n)`` binds ``m`` to fp32 on
purpose on one arm and to the factory's tensor on the other: whatever reads ``m`` was
written for the library's fp32, and ``dtype=h.dtype`` at the factory would only make the
two arms differ. A factory whose other arm is no such value (``m = mask if ... else
torch.ones(b, n)``, a ``mask`` of the model's dtype) is followed as before.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.asked import asked_fp32
from halfprec.leaks.lint.context import Context, words

_MOVES = words("to view reshape unsqueeze expand contiguous")  # t.to(device): still t


def asked_alternative(node: ast.AST, ctx: Context) -> bool:
    """Whether the factory's tensor made at ``node`` is one arm of a conditional expression
    whose other arm is fp32 the library asks for (see the module docstring)."""
    node = _moved(node, ctx)
    parent = ctx.parents.get(id(node))
    if isinstance(parent, ast.IfExp) and parent.test is not node:
        other = parent.orelse if parent.body is node else parent.body
        return asked_fp32(other, ctx.at(other))
    return False


def _moved(node: ast.AST, ctx: Context) -> ast.AST:
    """``node`` under the device moves and reshapes applied to it on its own chain
    (``torch.ones(n).to(x.device)``)."""
    for _ in range(8):
        attr = ctx.parents.get(id(node))
        call = ctx.parents.get(id(attr)) if isinstance(attr, ast.Attribute) else None
        if not (isinstance(call, ast.Call) and isinstance(attr, ast.Attribute)):
            return node
        if call.func is not attr or attr.attr not in _MOVES:
            return node
        node = call
    return node
