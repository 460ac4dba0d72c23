"""Half values scattered into a followed fp32 tensor (see :mod:`.fate`).

``buf.scatter_add_(0, idx, h)``, ``buf.index_add_(0, idx, h)``, ``buf.scatter_(1, idx, h)``,
``buf.scatter_reduce_(0, idx, h, "sum")``, ``buf.index_put_((idx,), h)`` and
``buf.put_(idx, h)`` raise when the source's dtype is not the receiver's ("scatter(): Expected
self.dtype to be equal to src.dtype"), so an fp32 zero buffer made to gather half messages,
features or edge weights is a leak that fails at once, chained
(``torch.zeros(n, d).to(dev).scatter_add_(0, idx, h)``) or bound first and scattered later.
A counter (a buffer whose source is integer, a number, or fp32 itself) is not: it keeps its
integer-ness, and the op makes it an integer-like value for the walk.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.escapes import overwrites
from halfprec.leaks.lint.reach import Follow

# the position and keyword of each op's source (the values written into the receiver)
_SOURCE = {
    "scatter_add_": (2, "src"),
    "scatter_": (2, "src"),
    "scatter_reduce_": (2, "src"),
    "index_add_": (2, "source"),
    "index_put_": (1, "values"),
    "put_": (1, "source"),
}


def scatter_step(f: Follow, call: ast.Call, name: str) -> str:
    """``t.<name>(...)`` of a counting op on the followed tensor ``t``: a leak when the
    values written into it are half, else ``"integer"`` (a counter, see the docstring)."""
    where = _SOURCE.get(name)
    if where is None:
        return "integer"
    index, keyword = where
    source = call.args[index] if len(call.args) > index else None
    for k in call.keywords:
        if k.arg == keyword:
            source = k.value
    if source is None or f.derived(source):
        return "integer"
    if f.floating(source):
        return "leak"
    return "up" if overwrites(call, name) else "integer"
