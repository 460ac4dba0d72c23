"""A tensor given to a submodule (see :mod:`.fate`): a layer with weights (``nn.Linear``)
meets it with half weights, a layer without (``nn.Dropout``) hands it on, and a recurrent
layer's state must be in its weights' dtype. A class of the file (or of another file of the
tree) is followed into its ``forward`` by :mod:`.reach` before these are asked.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.reach import Follow

_WEIGHTED = words(
    "Linear LazyLinear Bilinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d "
    "ConvTranspose3d Embedding EmbeddingBag LayerNorm GroupNorm RMSNorm BatchNorm1d "
    "BatchNorm2d BatchNorm3d MultiheadAttention LSTM GRU RNN PReLU Sequential"
)
_WEIGHTLESS = words(
    "Dropout Dropout1d Dropout2d Dropout3d AlphaDropout Identity Flatten Unflatten ReLU ReLU6 "
    "GELU SiLU Tanh Sigmoid Softmax LogSoftmax LeakyReLU ELU SELU CELU Mish Hardswish "
    "Hardsigmoid Hardtanh Softplus GLU Upsample PixelShuffle PixelUnshuffle AvgPool1d "
    "AvgPool2d AvgPool3d MaxPool1d MaxPool2d MaxPool3d AdaptiveAvgPool1d AdaptiveAvgPool2d "
    "AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d"
)


def hidden_state(ctx: Context, func: ast.AST, node: ast.AST, call: ast.Call) -> bool:
    """``self.lstm(x, (h, c))`` or ``hx=h``: the state of a recurrent layer, whose half
    weights need it in their dtype (an fp32 state is a dtype mismatch)."""
    attr = func.value if isinstance(func, ast.Subscript) else func
    name = attr.attr if isinstance(attr, ast.Attribute) else ""
    if dict(ctx.facts.layers).get(name, "") not in _RECURRENT:
        return False
    second = len(call.args) > 1 and call.args[1] is node
    return second or any(k.arg == "hx" and k.value is node for k in call.keywords)


_RECURRENT = words("LSTM GRU RNN")


def submodule(f: Follow, func: ast.AST) -> str:
    """``t`` as the first input of a submodule whose class this file does not define. A
    layer with weights (``nn.Linear``) meets it with half weights; a layer without
    (``nn.Dropout``) or a function attribute hands it on; for any other the lint cannot see
    what it does, so its result is followed and only a cast ends that path."""
    attr = func.value if isinstance(func, ast.Subscript) else func
    name = attr.attr if isinstance(attr, ast.Attribute) else ""
    layer = _built(f.ctx, dict(f.ctx.facts.layers).get(name, ""))
    if layer in _WEIGHTED:
        return "leak"
    if layer in _WEIGHTLESS or name in f.ctx.facts.passthrough:
        return "up"
    f.opaque = True
    return "up"


def _built(ctx: Context, layer: str) -> str:
    """``self.dpb = PositionBias(d)`` of a function of this file that returns
    ``nn.Sequential(...)``: the layer it builds (else ``layer`` as it is)."""
    calls = ctx.calls
    fn = calls.program.functions.get(layer) if calls is not None else None
    if calls is None or fn is None:
        return layer
    made = {
        dotted(r.func).rsplit(".", 1)[-1] if isinstance(r, ast.Call) else ""
        for r in calls.returns(fn)
    }
    return made.pop() if len(made) == 1 else layer


def is_submodule(ctx: Context, func: ast.AST) -> bool:
    """``self.proj(t)``, ``self.layers[i](t)``, ``layer(t)`` over ``self.layers``."""
    if isinstance(func, ast.Name):
        return func.id in ctx.modules
    if isinstance(func, ast.Subscript):
        func = func.value
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return False
    if func.value.id != "self":
        return False
    facts = ctx.facts
    known = func.attr in facts.attributes  # assigned in this file's class: a submodule
    return known and func.attr not in facts.methods and func.attr not in facts.tensors
