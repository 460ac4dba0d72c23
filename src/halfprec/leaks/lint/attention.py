"""A floating tensor handed to torch's attention layers beside a half query.

``nn.MultiheadAttention`` (and the transformer layers built on it) adds a floating
``attn_mask`` or ``key_padding_mask`` to its scores with ``baddbmm``, which raises when the
mask's dtype is not the query's ("Input dtypes must be the same", checked with torch 2.13);
its key and value must be the query's dtype too. So an fp32 additive mask (``0``/``-inf``
made by ``torch.where(c, torch.zeros(1), torch.full((1,), -inf))``, ``torch.triu(torch.full(
(n, n), -inf), 1)``) given to such a layer whose query is half is a leak that fails at once.
A boolean mask is not: the walk ends at ``.bool()`` or a comparison before it gets here.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import words
from halfprec.leaks.lint.reach import Follow
from halfprec.leaks.lint.submodules import layer_kinds

_ATTENTION = words(
    "MultiheadAttention TransformerEncoderLayer TransformerDecoderLayer TransformerEncoder "
    "TransformerDecoder Transformer"
)


def attention_input(f: Follow, node: ast.AST, call: ast.Call) -> bool:
    """Whether ``node``, the walk's fp32 floating tensor, is a later input (a mask, a key)
    of a torch attention layer called with a half first input."""
    kinds = layer_kinds(f.ctx, call.func)
    if not kinds or not all(k in _ATTENTION for k in kinds):
        return False
    if not call.args or call.args[0] is node or f.derived(call.args[0]):
        return False
    return f.floating(call.args[0])
