"""A followed tensor given to a sparse tensor's constructor (see :mod:`.fate`).

``torch.sparse_coo_tensor(indices, values, size)`` holds ``values`` as its own: the sparse
tensor has their dtype, and ``s._values()`` / ``s.values()`` hands them back (``v * dv`` in a
helper that multiplies them with a half matrix's entries, then ``torch.sparse.mm`` with half
features). Its index tensors become int64 whatever they were made as (a ``linspace`` row is
converted, checked with torch 2.13), so a tensor given as indices goes on as an integer
index. The compressed layouts (``sparse_csr_tensor(crow, col, values, size)`` and the rest)
and the legacy ``torch.sparse.FloatTensor(i, v, size)`` take their values after the indices.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted

# constructor: how many index tensors come before the values
_INDEX_COUNT = {
    "sparse_coo_tensor": 1,
    "sparse_csr_tensor": 2,
    "sparse_csc_tensor": 2,
    "sparse_bsr_tensor": 2,
    "sparse_bsc_tensor": 2,
    "sparse_compressed_tensor": 2,
}
_INDEX_KEYWORDS = frozenset(
    {
        "indices",
        "crow_indices",
        "col_indices",
        "ccol_indices",
        "row_indices",
        "compressed_indices",
        "plain_indices",
    }
)


def _constructor(call: ast.Call, ctx: Context) -> int | None:
    """How many index tensors ``call``'s sparse constructor takes before its values."""
    name = dotted(call.func)
    owner, _, last = name.rpartition(".")
    if owner in ctx.imports.torch and last in _INDEX_COUNT:
        return _INDEX_COUNT[last]
    if owner.endswith("sparse") and owner.split(".")[0] in ctx.imports.torch:
        return 1 if last.endswith("Tensor") else None  # torch.sparse.FloatTensor(i, v, size)
    return None


def sparse_step(node: ast.AST, call: ast.Call, ctx: Context) -> str | None:
    """``"integer"`` for ``node`` given as a sparse tensor's indices, ``"up"`` as its
    values, ``"safe"`` as its size; None when ``call`` makes no sparse tensor."""
    count = _constructor(call, ctx)
    if count is None:
        return None
    for k in call.keywords:
        if k.value is node:
            if k.arg in _INDEX_KEYWORDS:
                return "integer"
            return "up" if k.arg == "values" else "safe"
    if node not in call.args:
        return None
    at = call.args.index(node)
    return "integer" if at < count else "up" if at == count else "safe"
