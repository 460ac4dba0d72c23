"""An fp32 result read only for its order (see :mod:`.fate`): ``score = h + w * t`` with
``t`` fp32 is fp32, but when ``score`` is read only by ``argmax``, ``argmin`` or
``argsort`` (or compared), no fp32 value reaches a half op or the output: the indices
picked are what the model uses. ``topk`` and ``sort`` hand the values back too, so a
result read by them, or by anything else, keeps the meeting a leak.

On the way to the order the value may still be computed with: sliced (``d[None, :]``),
met in arithmetic (``g + flow - x``), and passed through elementwise math and reductions
along a dimension (``.norm(dim=-1)``, ``.abs()``, ``.sum(-1)``), so long as only the
indices leave: ``argmin``, a comparison, or the indices of ``min``/``max`` along a dimension
(``.min(dim=1).indices``, ``torch.max(d, 1)[1]``).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words

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
    """``torch.argmax(node, ...)``, ``node.argsort(...)``, ``node > v``, or such a read at the
    end of a chain of slices, arithmetic and value ops (see the module docstring)."""
    for _ in range(_CHAIN):
        parent = ctx.parents.get(id(node))
        if isinstance(parent, ast.Compare):
            return True
        if isinstance(parent, ast.BinOp) or _sliced(node, parent):
            node = parent  # type: ignore[assignment]
            continue
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
            name = dotted(parent.func).rsplit(".", 1)[-1]
            if dotted(parent.func).split(".")[0] not in ctx.imports.torch:
                return False
            if name in _ORDER or name in _PAIRED and _indices_of(ctx, parent):
                return True
            if name not in _VALUES:
                return False
            node = parent
            continue
        call = ctx.parents.get(id(parent)) if isinstance(parent, ast.Attribute) else None
        if not (isinstance(call, ast.Call) and call.func is parent):
            return False
        assert isinstance(parent, ast.Attribute)
        if parent.attr in _ORDER or parent.attr in _PAIRED and _indices_of(ctx, call):
            return True
        if parent.attr not in _VALUES:
            return False
        node = call
    return False


_CHAIN = 12  # steps from the meeting to the order read
_PAIRED = frozenset({"min", "max"})
_VALUES = words(
    "norm abs neg square sqrt pow exp log sum mean amin amax clamp view reshape flatten "
    "unsqueeze squeeze permute transpose contiguous"
)


def _sliced(node: ast.AST, parent: ast.AST | None) -> bool:
    """``node[None, :, 0]``: a read of ``node`` at slices, ``None`` and numbers."""
    if not (isinstance(parent, ast.Subscript) and parent.value is node):
        return False
    parts = parent.slice.elts if isinstance(parent.slice, ast.Tuple) else [parent.slice]
    return all(isinstance(p, (ast.Slice, ast.Constant)) for p in parts)


def _indices_of(ctx: Context, call: ast.Call) -> bool:
    """Whether only the indices of ``call`` (``d.min(dim=1)``, ``torch.max(d, 1)``) are read:
    ``.indices`` or ``[1]``; a call without a dimension gives the value alone."""
    outer = ctx.parents.get(id(call))
    if isinstance(outer, ast.Attribute) and outer.attr == "indices":
        return True
    index = outer.slice if isinstance(outer, ast.Subscript) else None
    return isinstance(index, ast.Constant) and index.value == 1
