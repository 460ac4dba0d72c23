"""A condition of one value per batch item, handed to a network with its half input.

A sampler or a training step makes the time, noise level or sigma of each item as a
vector as long as the batch (``t * torch.ones(x.shape[0])``, ``torch.full((b,), s)``,
``torch.rand(len(x))``) and hands it to the network beside the half state:
``self.estimator(input=x, condition=time)``. In a model converted to half, the network
embeds that condition with its half weights (``t[:, None] * W``, a Fourier projection, a
sinusoidal table into a half ``Linear``), so an fp32 vector is a dtype leak there, also
where the lint cannot see the network's class. Silent: a vector not sized by a batch, one
handed to a submodule with no half input beside it, and its first input (which
:mod:`.submodules` judges).
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.reach import Follow

_SIZED = frozenset({"zeros", "ones", "empty", "rand", "randn", "full"})


def batch_sized(node: ast.AST, ctx: Context) -> bool:
    """Whether the factory call ``node`` makes one value per item of a batch: its only
    size is ``h.shape[0]``, ``h.size(0)``, ``len(h)`` or a name bound to one of them
    (``b = h.shape[0]``, ``b, c, t = h.shape``)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr not in _SIZED:
        return False
    args = node.args
    if node.func.attr == "full":  # full((b,), value): the size is a sequence
        sizes = args[0].elts if args and isinstance(args[0], (ast.Tuple, ast.List)) else []
    elif len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        sizes = args[0].elts  # ones((b,))
    else:
        sizes = args  # ones(b)
    if len(sizes) != 1:
        return False
    size = sizes[0]
    if isinstance(size, ast.Name):
        return _batch_name(size, ctx)
    return _batch_size(size)


def _batch_size(size: ast.AST) -> bool:
    """``h.shape[0]``, ``h.size(0)``, ``len(h)``."""
    if isinstance(size, ast.Subscript):
        index = size.slice
        shape = isinstance(size.value, ast.Attribute) and size.value.attr == "shape"
        return shape and isinstance(index, ast.Constant) and index.value == 0
    if not isinstance(size, ast.Call):
        return False
    if isinstance(size.func, ast.Name):
        return size.func.id == "len" and len(size.args) == 1
    first = size.args[0] if len(size.args) == 1 else None
    sized = isinstance(size.func, ast.Attribute) and size.func.attr == "size"
    return sized and isinstance(first, ast.Constant) and first.value == 0


def _batch_name(name: ast.Name, ctx: Context) -> bool:
    """``b`` bound by ``b = h.shape[0]`` or as the first of ``b, c, t = h.shape``."""
    for node in ctx.names(name.id):
        if (node.lineno, node.col_offset) >= (name.lineno, name.col_offset):
            break
        stmt = ctx.statement_of(node)
        if not (isinstance(node.ctx, ast.Store) and isinstance(stmt, ast.Assign)):
            continue
        target, value = stmt.targets[0], stmt.value
        if target is node and _batch_size(value):
            return True
        unpacked = isinstance(target, ast.Tuple) and target.elts[:1] == [node]
        if unpacked and _shape_of(value):
            return True
    return False


def _shape_of(value: ast.AST) -> bool:
    """``h.shape`` or ``h.size()``."""
    if isinstance(value, ast.Attribute):
        return value.attr == "shape"
    if not isinstance(value, ast.Call) or value.args:
        return False
    return isinstance(value.func, ast.Attribute) and value.func.attr == "size"


def condition_with_half(f: Follow, node: ast.AST, call: ast.Call) -> bool:
    """Whether ``node``, a walk's per-batch vector, is handed to the submodule ``call`` as
    a later input, beside a half tensor (positional or keyword)."""
    if not f.batched:
        return False
    given = [*call.args, *(k.value for k in call.keywords)]
    value = node.value if isinstance(node, ast.keyword) else node
    return any(a is not value and f.floating(a) for a in given)
