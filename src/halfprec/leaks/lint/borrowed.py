"""Tensors made in the dtype read from a followed tensor (see :mod:`.fate`).

``buf = torch.zeros(n, dtype=t.dtype)`` or ``h.to(t.dtype)`` makes a tensor of ``t``'s
dtype: where ``t`` is fp32 in a half model (a default ``torch.ones(n)``), so is the new
tensor, and it is followed on as ``t`` would be. The dtype may go through
``torch.promote_types``/``torch.result_type`` (fp32 with half promotes to fp32), a
conditional expression, or a name bound to it (``dt = t.dtype``) first.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted

_MAX_NAMES = 3  # names a dtype is followed through (dt = t.dtype; dt2 = promote(dt, ...))


def made_in_dtype(node: ast.AST, ctx: Context, depth: int = 0) -> list[ast.Call]:
    """The calls that make a tensor in the dtype ``node`` holds (``t.dtype``, or a name
    bound to it)."""
    parents = ctx.parents
    while True:
        parent = parents.get(id(node))
        if isinstance(parent, ast.IfExp) and parent.test is not node:
            node = parent
            continue
        if isinstance(parent, ast.Call) and node in parent.args:
            name = dotted(parent.func).rsplit(".", 1)[-1]
            if name in ("promote_types", "result_type"):
                node = parent  # fp32 with any half dtype promotes to fp32
                continue
            if name in ("to", "type") and isinstance(parent.func, ast.Attribute):
                return [parent]  # h.to(t.dtype)
            return []
        if isinstance(parent, ast.keyword) and parent.arg == "dtype":
            call = parents.get(id(parent))
            return [call] if isinstance(call, ast.Call) else []
        if isinstance(parent, ast.Assign) and depth < _MAX_NAMES:
            targets = parent.targets
            if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                return []
            return _through_name(targets[0].id, parent, ctx, depth)
        return []


def _through_name(name: str, stmt: ast.Assign, ctx: Context, depth: int) -> list[ast.Call]:
    out: list[ast.Call] = []
    for use in ctx.uses_after(name, stmt):
        out += made_in_dtype(use, ctx, depth + 1)
    return out
