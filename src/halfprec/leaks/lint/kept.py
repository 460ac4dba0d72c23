"""Ops whose result has their operands' dtype, for fp32 the library asks for (see
:mod:`.asked`).

A value made fp32 on purpose stays fp32 through the ops that compute with it and hand back
a tensor of their floating inputs' promoted dtype: elementwise math (``s.exp()``,
``torch.sqrt(s)``), reductions along a dimension (``torch.sum(s, dim=-1)``,
``s.cumsum(-1)``), clamps and fills (``s.clamp(min=0)``, ``s.masked_fill(m, 0)``),
arithmetic with another tensor (``torch.div(a, n)``, ``a.mul(n)``), picks
(``torch.gather(s, 1, i)``) and tensors made like it (``torch.zeros_like(s)``,
``s.new_zeros(n)``), unless given a ``dtype=``. So ``scores *
total_effect`` of ``total_effect = torch.clamp((d * g).exp(), max=1e5)`` and ``d`` computed
from ``p * mask.float()`` is fp32 because of that ``.float()``, checked with torch 2.13.

A layer with weights held by the module (``self.gru_cell = nn.GRUCell(...)``: a linear,
recurrent, convolution, bilinear or attention layer) raises when an fp32 input meets its
half weights ("mat1 and mat2 must have the same dtype", checked with torch 2.13, fp16 and
bf16), so a value it returns from such an input never exists in a half model: ``et =
self.gru_cell(i, et)`` of an fp32 ``i`` leaves ``et`` only the fp32 it started with.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words

KEPT = words(
    "exp exp2 expm1 log log1p log2 log10 sqrt rsqrt abs neg sigmoid tanh relu softplus "
    "sin cos reciprocal square pow erf softmax log_softmax cumsum cumprod logcumsumexp "
    "clamp clamp_min clamp_max clip masked_fill tril triu flip roll sum mean prod nansum "
    "nanmean amax amin logsumexp mul add sub div true_divide multiply matmul bmm mm einsum "
    "where maximum minimum max min gather index_select take_along_dim zeros_like ones_like "
    "full_like empty_like rand_like randn_like new_zeros new_ones new_full new_empty"
)

_RAISING = words(
    "Linear LazyLinear Bilinear GRUCell LSTMCell RNNCell GRU LSTM RNN Conv1d Conv2d Conv3d "
    "ConvTranspose1d ConvTranspose2d ConvTranspose3d MultiheadAttention"
)


def kept_operands(call: ast.Call, ctx: Context) -> list[ast.AST]:
    """The tensors whose dtype ``call``'s result has, where it is such an op: the receiver
    and the arguments of a method (``s.mul(n)``), the positional arguments of a torch
    function (``torch.div(a, n)``); empty for any other call."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in KEPT:
        return []
    if any(k.arg in ("dtype", None) for k in call.keywords):
        return []  # torch.sum(s, dtype=h.dtype): the result has the dtype asked for
    args = [a for a in call.args if not isinstance(a, ast.Starred)]
    owner = dotted(func.value)
    if owner in ctx.imports.torch or owner in ctx.imports.functional:
        return list(args)
    return [func.value, *args]


def raising_inputs(call: ast.Call, ctx: Context) -> list[ast.AST]:
    """The inputs of ``self.<layer>(...)`` where the module holds a layer with weights that
    raises on an fp32 input (see the module docstring); empty for any other call."""
    func = call.func
    if not isinstance(func, ast.Attribute) or dotted(func.value) != "self":
        return []
    if dict(ctx.facts.layers).get(func.attr, "") not in _RAISING:
        return []
    return [a for a in call.args if not isinstance(a, ast.Starred)]
