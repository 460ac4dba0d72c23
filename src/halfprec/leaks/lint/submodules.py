"""A tensor given to a submodule (see :mod:`.fate`): a layer with weights (``nn.Linear``)
meets it with half weights, a layer without (``nn.Dropout``) hands it on, and a recurrent
layer's state must be in its weights' dtype. A class of the file (or of another file of the
tree) is followed into its ``forward`` by :mod:`.reach` before these are asked.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.reach import Follow
from halfprec.leaks.lint.transforms import transform_layer

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
    if isinstance(func, ast.Name):
        name = ctx.modules.get(func.id, "")  # for cell in self.cells: cell(x, (h, c))
    layer = dict(ctx.facts.layers).get(name, "")
    if any(k.arg == "hx" and k.value is node for k in call.keywords):
        return layer != ""  # torch's recurrent layers alone take hx, also from a ModuleList
    held = dict(ctx.facts.elements).get(name, ()) if layer in _CONTAINERS else (layer,)
    kinds = [k for h in held for k in _built(ctx, h).split("|")]
    recurrent = bool(kinds) and all(k in _RECURRENT for k in kinds)
    return recurrent and len(call.args) > 1 and call.args[1] is node


_CONTAINERS = words("ModuleList Sequential ModuleDict")
_LOOKUPS = words("Embedding EmbeddingBag")


_RECURRENT = words("LSTM GRU RNN LSTMCell GRUCell RNNCell")


def submodule(f: Follow, func: ast.AST) -> str:
    """``t`` as the first input of a submodule whose class this file does not define. A
    layer with weights (``nn.Linear``) meets it with half weights; a layer without
    (``nn.Dropout``) or a function attribute hands it on; for any other the lint cannot see
    what it does, so its result is followed and only a cast ends that path."""
    if f.empty:
        return "safe"  # a layer given a tensor with no elements raises or gives none
    names = _attributes(f.ctx, func)
    name = names[0] if len(names) == 1 else ""
    weighted = any(_weighted(f.ctx, n) for n in names) or _base_layer(f.ctx, func) in _WEIGHTED
    if weighted or _weights_read(f.ctx, name):
        # half weights take only half inputs (integer ones raise there too), but an
        # embedding takes integer indices
        layers = dict(f.ctx.facts.layers)
        f.strict = not any(_built(f.ctx, layers.get(n, "")) in _LOOKUPS for n in names)
        return "leak"
    layer = _built(f.ctx, dict(f.ctx.facts.layers).get(name, ""))
    held = dict(f.ctx.facts.elements).get(name, ())
    if layer in LOSS_LAYERS:
        f.scalar = True  # self.ce(t, y): the loss of t, 0-dim in t's dtype at least
        return "up"
    if layer in _WEIGHTLESS or name in f.ctx.facts.passthrough:
        return "up"
    if transform_layer(f.ctx, name):
        return "up"  # self.rotate = v2.RandomAffine(...): no weights, its input's dtype
    if held and all(h in _WEIGHTLESS for h in held):
        return "up"  # for act in self.acts: nn.ModuleList([nn.GELU(), nn.Dropout(p)])
    f.opaque = True
    return "up"


_WEIGHT_READS = words("weight bias parameters")


def _weights_read(ctx: Context, name: str) -> bool:
    """``self.proj.conv.weight.device`` or ``self.proj.parameters()`` read in the walked
    function: ``self.proj`` holds weights, of whatever class (a layer of another library)."""
    if not name or ctx.function is None:
        return False
    for node in walk(ctx.function):
        if not (isinstance(node, ast.Attribute) and node.attr in _WEIGHT_READS):
            continue
        inner = node.value
        while isinstance(inner, ast.Attribute) and dotted(inner.value) != "self":
            inner = inner.value
        if isinstance(inner, ast.Attribute) and inner.attr == name:
            return True
    return False


def _attributes(ctx: Context, func: ast.AST) -> list[str]:
    """The attributes of ``self`` a call may run: ``self.proj``, ``self.layers[i]``,
    ``layer`` in ``for layer in self.layers``, ``getattr(self, "proj")`` and every
    ``self.block<i>`` of ``getattr(self, f"block{i}")``."""
    if isinstance(func, ast.Name):
        return [ctx.modules.get(func.id, "")]  # for layer in self.layers: layer(t)
    if _getattr_self(func):
        assert isinstance(func, ast.Call)
        key = func.args[1]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return [key.value]
        head = key.values[0] if isinstance(key, ast.JoinedStr) and key.values else None
        if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value:
            return [a for a in ctx.facts.attributes if a.startswith(head.value)]
        return []
    attr = func.value if isinstance(func, ast.Subscript) else func
    return [attr.attr] if isinstance(attr, ast.Attribute) else []


def layer_kinds(ctx: Context, func: ast.AST) -> list[str]:
    """The torch layer classes a submodule call ``func`` may run (``MultiheadAttention``
    for ``self.attn``), as the class's ``__init__`` builds them; empty where not known."""
    layers = dict(ctx.facts.layers)
    return [_built(ctx, layers.get(n, "")) for n in _attributes(ctx, func) if layers.get(n)]


def _getattr_self(func: ast.AST) -> bool:
    """``getattr(self, name)``."""
    return (
        isinstance(func, ast.Call)
        and dotted(func.func) == "getattr"
        and len(func.args) == 2
        and dotted(func.args[0]) == "self"
    )


def _super_forward(func: ast.AST) -> bool:
    """``super().forward`` or ``super().__call__``."""
    return (
        isinstance(func, ast.Attribute)
        and func.attr in ("forward", "__call__")
        and isinstance(func.value, ast.Call)
        and dotted(func.value.func) == "super"
    )


def _base_layer(ctx: Context, func: ast.AST) -> str:
    """``super().forward(t)`` in ``class Sub(nn.Linear)``: the layer the class extends."""
    calls, fn = ctx.calls, ctx.function
    if not _super_forward(func) or calls is None or not isinstance(fn, ast.FunctionDef):
        return ""
    owner = calls.program.owner_of(fn)
    cls = calls.program.classes.get(owner) if owner else None
    bases = [dotted(b).rsplit(".", 1)[-1] for b in cls.bases] if cls is not None else []
    return next((b for b in bases if b in _WEIGHTED), "")


def _weighted(ctx: Context, name: str) -> bool:
    """``self.<name>`` is a layer with weights, or a ``ModuleList``/``ModuleDict`` (or one
    built by ``append``) that holds one: a loop over it, or an item of it, gives ``t`` to a
    layer with weights, on the first pass or after the weightless ones."""
    if _built(ctx, dict(ctx.facts.layers).get(name, "")) in _WEIGHTED:
        return True
    held = dict(ctx.facts.elements).get(name, ())
    return any(_built(ctx, layer) in _WEIGHTED for layer in held)


def _built(ctx: Context, layer: str) -> str:
    """``self.dpb = PositionBias(d)`` of a function of this file that returns
    ``nn.Sequential(...)``, or ``self.proj = LinearNoBias(d, d)`` of a name this file or
    another file of the tree binds to ``partial(nn.Linear, bias=False)``: the layer it
    builds (else ``layer`` as it is)."""
    calls = ctx.calls
    if calls is None or not layer or layer in _WEIGHTED or layer in _WEIGHTLESS:
        return layer
    aliased = calls.program.aliases.get(layer) or (calls.alias(layer) if calls.alias else "")
    if aliased:
        return aliased  # LinearNoBias = partial(nn.Linear, bias=False): a Linear
    fn = calls.program.functions.get(layer)
    if fn is None:
        return layer
    made = {
        dotted(r.func).rsplit(".", 1)[-1] if isinstance(r, ast.Call) else ""
        for r in calls.returns(fn)
    }
    return made.pop() if len(made) == 1 else layer


LOSS_LAYERS = words(
    "L1Loss MSELoss CrossEntropyLoss CTCLoss NLLLoss PoissonNLLLoss GaussianNLLLoss KLDivLoss "
    "BCELoss BCEWithLogitsLoss MarginRankingLoss HingeEmbeddingLoss MultiLabelMarginLoss "
    "HuberLoss SmoothL1Loss SoftMarginLoss MultiLabelSoftMarginLoss CosineEmbeddingLoss "
    "MultiMarginLoss TripletMarginLoss TripletMarginWithDistanceLoss"
)


# the losses whose output is fp32 for a half input and an fp32 target (checked with torch)
_TARGET_PROMOTES = words(
    "L1Loss MSELoss SmoothL1Loss BCELoss BCEWithLogitsLoss KLDivLoss CrossEntropyLoss "
    "MultiLabelSoftMarginLoss PoissonNLLLoss GaussianNLLLoss MarginRankingLoss "
    "TripletMarginLoss"
)


def loss_input(f: Follow, func: ast.AST) -> bool:
    """``self.ce(h, t)``: a torch loss layer held on ``self`` whose output takes the dtype
    of its target too (0-dim, fp32 when ``t`` is); a loss that only compares its target
    (``CosineEmbeddingLoss``) keeps the input's dtype."""
    names = _attributes(f.ctx, func)
    name = names[0] if len(names) == 1 else ""
    if _built(f.ctx, dict(f.ctx.facts.layers).get(name, "")) not in _TARGET_PROMOTES:
        return False
    f.scalar = True
    return True


def is_submodule(ctx: Context, func: ast.AST) -> bool:
    """``self.proj(t)``, ``self.layers[i](t)``, ``layer(t)`` over ``self.layers``,
    ``getattr(self, name)(t)``, ``super().forward(t)``."""
    if isinstance(func, ast.Name):
        return func.id in ctx.modules
    if _getattr_self(func) or _super_forward(func):
        return True
    if isinstance(func, ast.Subscript):
        func = func.value
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return False
    if func.value.id != "self":
        return False
    facts = ctx.facts
    known = func.attr in facts.attributes  # assigned in this file's class: a submodule
    return known and func.attr not in facts.methods and func.attr not in facts.tensors
