"""0-dim elements of a one-dimensional fp32 tensor (see :mod:`.fate`): ``scales[k]`` of
``scales = torch.logspace(-1, 0, n)``, or each ``s`` of ``for h, s in zip(hs, scales)``.
Torch's type promotion keeps a half operand with dimensions half against a 0-dim fp32
tensor, so such an element meets half tensors without a leak (a 0-dim half operand, or the
output, still takes fp32 from it).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import dotted, words

_RANGES = words("linspace logspace")
_INT_CALLS = words("len int")


def ranged_vector(node: ast.AST) -> bool:
    """``torch.linspace(a, b, n)``, ``torch.logspace(a, b, n)``: one dimension always."""
    return isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] in _RANGES


def int_index(index: ast.AST) -> bool:
    """An index that is one Python integer: ``3``, ``len(xs)``, ``len(xs) + 1``, ``-1``
    (not a slice, a tuple of indices or a tensor of them)."""
    if isinstance(index, ast.Constant):
        return type(index.value) is int
    if isinstance(index, ast.UnaryOp):
        return int_index(index.operand)
    if isinstance(index, ast.BinOp) and isinstance(index.op, (ast.Add, ast.Sub, ast.Mult)):
        return int_index(index.left) and int_index(index.right)
    return (
        isinstance(index, ast.Call)
        and isinstance(index.func, ast.Name)
        and index.func.id in _INT_CALLS
    )
