"""Writes into a tensor at tensor indices (see :mod:`.fate`).

``h[1:3] = t`` and ``h[0] = t`` copy ``t`` into ``h`` in ``h``'s dtype, but ``h[idx] = t``
with a tensor ``idx`` (integer or boolean) is ``index_put_``, and ``h.index_copy_(0, idx,
t)`` and ``h.masked_scatter_(m, t)`` are its kin: each raises when ``t``'s dtype is not
``h``'s ("Index put requires the source and destination dtypes match"). So an fp32 tensor
written that way into a half tensor is a leak that fails at once.

An index is a tensor when the code says so: a comparison of a tensor (``h[labels == -1]``,
``~mask``), an integer or sorting op (``torch.arange``, ``t.nonzero()``, ``t.argsort()``,
``t.long()``), one of these reshaped or copied (``m.reshape(-1).clone()``), or a name last
bound to one of these. A parameter or a name the lint cannot
see bound is not known to be a tensor (it may be an int), unless annotated as one.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.scalars import integer_tensor

# h.index_copy_(0, idx, t): t must have h's dtype
SOURCES = words("index_copy_ masked_scatter_ index_copy masked_scatter")
_MAKERS = words(
    "nonzero argsort argmax argmin topk sort where long int bool randperm arange "
    "searchsorted bucketize unique multinomial"
)

# the same index tensor, reshaped or copied: m.reshape(-1).clone() is a mask as m is
_RESHAPES = words("reshape view flatten clone contiguous squeeze unsqueeze detach expand t")


def tensor_index(index: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether the subscript ``index`` (or one of its parts) is a tensor of indices or a
    mask, by the code that makes it (see the module docstring)."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return any(_tensor(p, ctx, depth) for p in parts)


def _tensor(node: ast.AST, ctx: Context, depth: int) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        return _tensor(node.operand, ctx, depth)
    if isinstance(node, ast.Compare):
        return any(_tensor_like(o) for o in (node.left, *node.comparators))
    if (
        isinstance(node, ast.BoolOp)
        or isinstance(node, ast.BinOp)
        and isinstance(node.op, (ast.BitAnd, ast.BitOr))
    ):
        pieces = node.values if isinstance(node, ast.BoolOp) else [node.left, node.right]
        return any(_tensor(p, ctx, depth) for p in pieces)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else ""
        if name in _RESHAPES and isinstance(func, ast.Attribute):
            return _tensor(func.value, ctx, depth)  # m.reshape(-1).clone() of a mask m
        return integer_tensor(node, ctx) or name in _MAKERS and name not in ("long", "int", "bool")
    if isinstance(node, ast.Name) and depth < 3:
        bound = ctx.binding_before(node)
        if bound is None:
            return _tensor_parameter(node.id, ctx)
        return _tensor(bound, ctx, depth + 1)
    return False


def _tensor_parameter(name: str, ctx: Context) -> bool:
    """A parameter of the function annotated as a tensor (``idx: torch.Tensor``)."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        if p.arg == name and p.annotation is not None:
            text = dotted(p.annotation)
            return text.rsplit(".", 1)[-1] in ("Tensor", "LongTensor", "BoolTensor")
    return False


def _tensor_like(node: ast.AST) -> bool:
    """An operand of a comparison that may be a tensor: anything but a number. A
    comparison of two Python numbers as an index (``h[i == 0]``) is a bool that adds a
    dimension, which forward code does not write."""
    return not isinstance(node, ast.Constant) and not (
        isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)
    )


def half_written_at(
    subscript: ast.Subscript, floating: Callable[[ast.AST], bool], ctx: Context
) -> bool:
    """``t[i, idx] = h``: a half value written into the followed tensor ``t`` at tensor
    indices, which raises as the other way round does."""
    stmt = ctx.parents.get(id(subscript))
    if not (isinstance(stmt, ast.Assign) and subscript in stmt.targets):
        return False
    return tensor_index(subscript.slice, ctx) and floating(stmt.value)
