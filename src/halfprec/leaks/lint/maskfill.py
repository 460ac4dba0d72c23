"""A 0-dim tensor written at a boolean mask (see :mod:`.statements`).

``x[mask] = torch.tensor(float("inf"))`` with a boolean ``mask`` is a masked fill: ``x``
keeps its own dtype, half or fp32, and the 0-dim value is cast into it (checked with torch
2.13, fp16 and bf16; a boolean mask of one element's value, ``torch.tensor([c])``, too). So
the 0-dim tensor's dtype decides nothing there, whatever ``x`` is. At integer indices
(``x[idx] = torch.tensor(c)``) it is ``index_put_``, which raises unless the dtypes match,
and a source with more elements raises at a boolean mask too: those stay with the walk.

A boolean mask, by the code that makes it: a comparison of a tensor (``x > m``), ``~``,
``&``, ``|`` of masks, ``isinf``/``isnan``/``isfinite``, ``logical_*``, ``.bool()``, a name
bound to one, or a parameter that every call of the file passes one (:mod:`.decided`).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, words
from halfprec.leaks.lint.decided import binding_of, passed

_DEPTH = 6  # names and parameters followed back from the index
_MASKS = words(
    "isinf isnan isfinite isposinf isneginf isclose logical_and logical_or logical_not "
    "logical_xor bool eq ne lt le gt ge"
)


def boolean_mask(node: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether ``node``, an index, is a boolean tensor (see the module docstring)."""
    if depth >= _DEPTH:
        return False
    if isinstance(node, ast.Compare):
        return not all(isinstance(o, ast.Constant) for o in (node.left, *node.comparators))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        return boolean_mask(node.operand, ctx, depth)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return boolean_mask(node.left, ctx, depth) and boolean_mask(node.right, ctx, depth)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in _MASKS
    if isinstance(node, ast.Name):
        bound, index, _ = binding_of(node, ctx)  # above, below = x > m, x < -m: an element
        if bound is None:
            return passed(node, ctx, boolean_mask, depth)
        return index is None and boolean_mask(bound, ctx, depth + 1)
    return False


def filled_at_mask(target: ast.Subscript, ctx: Context) -> bool:
    """``x[mask] = t`` of a boolean ``mask`` (the followed ``t`` being 0-dim): a masked
    fill, in ``x``'s dtype."""
    return boolean_mask(target.slice, ctx)
