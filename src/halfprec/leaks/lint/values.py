"""Which expressions are floating tensors: the data-flow model of the lint.

:func:`value_of` answers for one expression, from what :class:`~.context.Context` knows
about names: ``None`` (not known to be a floating tensor), ``False`` (floating, guessed
from a name or a ``torch.Tensor`` annotation) or ``True`` (floating, *proved*: its dtype is
the model's floating dtype, so a fix that inherits it changes no fp32 result).

Proved floating: the first positional input of a module's ``forward`` (the activation the
module is called with, unless its name or annotation says ids or a mask), an input
annotated ``torch.FloatTensor``, a submodule's output (``self.embed(ids)``,
``self.layers[i](h)``, ``layer(h)`` over ``self.layers``), a floating parameter or buffer
(``self.pos``), ``.to(y.dtype)`` of a proved ``y``, ops that always return floating
(``softmax``, ``sigmoid``, ``exp``...) applied to a floating tensor, true division,
arithmetic with a float literal, and anything shaped from or combined with a proved tensor
through dtype-keeping ops (``view``, ``+``, ``torch.cat``, indexing...).

Not floating in the model's dtype: ``.float()``, ``.double()`` and ``.to(torch.float32)``
(fp32 on purpose, in a half model too: HP201's finding, and a factory that meets them
matches them), and ``torch.exp(torch.arange(n).float())``-style tables made from them.
An element of a submodule's tuple result (``outputs[1]``) is only guessed: a router may
return integer indices.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from halfprec.leaks.lint.callers import argument_for
from halfprec.leaks.lint.comprehensions import element_source
from halfprec.leaks.lint.context import Context, Template, dotted, words
from halfprec.leaks.lint.keyed import held_key
from halfprec.leaks.lint.nodes import parameters, walk
from halfprec.leaks.lint.pyints import int_bound, int_scalar
from halfprec.leaks.lint.receivers import template_at
from halfprec.leaks.lint.returned import returned_values
from halfprec.leaks.lint.scalars import LOSSES
from halfprec.leaks.lint.selfkept import PREFIX, kept_elsewhere
from halfprec.leaks.lint.transforms import transform_layer

INDEX_NAME = re.compile(
    r"(^|_)(ids?|mask|masks|position|positions|index|indices|idx|labels?|lengths?|lens|count|"
    r"cache|shape|size|dim|step|seed|num|bool|token_type)(_|$|s$)",
    re.IGNORECASE,
)
_ACTIVATION_NAMES = words(
    "x h hidden input inputs query key value q k v features feats emb embeddings logits scores "
    "z img image images audio waveform signal tensor xs out output attn_weights attn_output "
    "pixel_values"
)
_KEEPS_DTYPE = words(
    "view reshape transpose permute contiguous flatten unsqueeze squeeze expand expand_as "
    "repeat softmax log_softmax matmul bmm mean sum clone exp sqrt rsqrt pow tanh sigmoid relu "
    "masked_fill narrow detach abs neg mul add sub div clamp clamp_min clamp_max tril triu "
    "flip roll cumsum "
    "view_as reshape_as type_as to_dense new_zeros new_ones new_empty new_full new_tensor "
    "repeat_interleave movedim swapaxes unflatten cpu cuda split chunk tensor_split "
    "index_select mm mv t"
)
_FLOAT_RESULT = words(
    "softmax log_softmax sigmoid tanh exp log log1p sqrt rsqrt gelu silu erf layer_norm "
    "group_norm normalize scaled_dot_product_attention"
)
_TORCH_KEEPS = words(
    "matmul bmm mm einsum softmax log_softmax relu gelu silu tanh sigmoid exp sqrt rsqrt abs cat "
    "stack where add mul sub div baddbmm addmm linear layer_norm dropout transpose permute "
    "reshape flatten clamp pow mean sum cos sin tril triu pad interpolate conv1d conv2d "
    "normalize scaled_dot_product_attention repeat_interleave roll maximum minimum zeros_like "
    "ones_like empty_like full_like rand_like randn_like diag diag_embed diagonal outer kron "
    "flip roll narrow squeeze unsqueeze clone neg cumsum cumprod log log1p sin cos nan_to_num "
    "lerp tile flatten movedim remainder fmod t mv"
)
_ARITHMETIC = words("add sub mul div true_divide rsub")
_REARRANGES = words("rearrange repeat einops.rearrange einops.repeat")
_KEEPS_ATTR = frozenset({"T", "mT", "H", "mH", "data", "real"})
_FP32 = frozenset({"float32", "float"})
_NOT_FLOAT = words(
    "long int int64 int32 int16 int8 uint8 bool short half float16 bfloat16 double float64"
)
_DEVICE_ATTRS = frozenset({"device"})
_TENSOR_FACTS = frozenset({"shape", "size", "device", "dtype", "ndim"})


def _join(values: list[bool | None]) -> bool | None:
    """Floating when any operand is; proved when any floating operand is proved."""
    floating = [v for v in values if v is not None]
    return any(floating) if floating else None


def _operands(expr: ast.AST) -> tuple[list[ast.AST], bool]:
    """The operands of a chain of arithmetic (``a + b * -c``), found without recursion so
    that a long sum cannot exhaust the stack; and whether a division is among the ops."""
    leaves: list[ast.AST] = []
    divides = False
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.BinOp):
            divides = divides or isinstance(e.op, ast.Div)
            stack += [e.right, e.left]
        elif isinstance(e, ast.UnaryOp):
            stack.append(e.operand)
        else:
            leaves.append(e)
    return leaves, divides


def _float_literal(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Constant) and isinstance(expr.value, float)


def _unlist(expr: ast.AST) -> ast.AST:
    if isinstance(expr, (ast.List, ast.Tuple)) and expr.elts:
        return expr.elts[0]
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
        return expr.elt  # torch.cat([p.unsqueeze(0) for p in parts]): each element's dtype
    return expr


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def value_of(expr: ast.AST, ctx: Context) -> bool | None:
    """See the module docstring."""
    if isinstance(expr, ast.Name):
        got = ctx.floating.get(expr.id)
        return _element_value(expr, ctx) if got is None else got
    if isinstance(expr, (ast.BinOp, ast.UnaryOp)):
        operands, divides = _operands(expr)
        if any(_fp32_factory(e, ctx) for e in operands):
            return None  # h + eps * torch.eye(n) is fp32 in a half model: HP101's to report
        joined = _join([value_of(e, ctx) for e in operands])
        if joined is None:
            return None
        return joined or divides or any(_float_literal(e) for e in operands)
    if isinstance(expr, ast.Subscript):
        first = isinstance(expr.slice, ast.Constant) and expr.slice.value == 0
        if first and isinstance(expr.value, ast.Call):  # torch.max(h, dim=1)[0]: the values
            paired = _paired_values(expr.value, ctx)
            if paired is not None:
                return paired
        inner = value_of(expr.value, ctx)
        if isinstance(expr.value, ast.Name) and expr.value.id in ctx.outputs:
            return False if inner is not None else None
        return inner
    if isinstance(expr, ast.IfExp):
        both = [value_of(expr.body, ctx), value_of(expr.orelse, ctx)]
        return None if None in both else all(both)
    if isinstance(expr, ast.Attribute):
        if _is_self(expr.value):
            if expr.attr in ctx.facts.tensors:
                return True
            kept = ctx.floating.get(PREFIX + expr.attr)  # self.w = h earlier (see .selfkept)
            return kept if kept is not None else kept_elsewhere(expr.attr, ctx)
        if expr.attr in _KEEPS_ATTR:
            return value_of(expr.value, ctx)
        if expr.attr == "values" and isinstance(expr.value, ast.Call):
            return _paired_values(expr.value, ctx)  # torch.max(h, dim=0).values
        return None
    if isinstance(expr, ast.Call):
        return _call_value(expr, ctx)
    return None


_FP32_FACTORIES = words("zeros ones empty rand randn eye linspace logspace")
_PAIRED = words("max min sort topk kthvalue median mode cummax cummin")


def _element_value(name: ast.Name, ctx: Context) -> bool | None:
    """``b`` in ``[b * s for b, s in zip(boxes, scales)]``: an element of the iterable the
    comprehension takes it from (also through ``enumerate``), in its dtype."""
    node: ast.AST = name
    for _ in range(_MAX_UP):
        parent = ctx.parents.get(id(node))
        if parent is None or isinstance(parent, ast.stmt):
            return None
        if isinstance(parent, _COMPREHENSIONS) and node is not parent.generators[0].iter:
            for gen in parent.generators:
                source = element_source(gen.target, gen.iter, name.id)
                if source is not None:
                    return value_of(source, ctx)
        node = parent
    return None


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_MAX_UP = 12  # expressions climbed from a name to the comprehension that binds it


def _paired_values(call: ast.Call, ctx: Context) -> bool | None:
    """The ``values`` of a (values, indices) pair: ``torch.max(h, dim=0)``, ``h.topk(k)``
    hold ``h``'s values, in its dtype."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _PAIRED:
        return None
    if dotted(func.value) in ctx.imports.torch:
        return value_of(call.args[0], ctx) if call.args else None
    return value_of(func.value, ctx)


def _fp32_factory(expr: ast.AST, ctx: Context) -> bool:
    """``torch.eye(n)``: a factory that makes fp32 whatever the model's dtype."""
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Attribute):
        return False
    owner = expr.func.value
    if not (isinstance(owner, ast.Name) and owner.id in ctx.imports.torch):
        return False
    if expr.func.attr not in _FP32_FACTORIES or not expr.args:
        return False
    return not any(k.arg in ("dtype", None) for k in expr.keywords)


def _submodule_value(call: ast.Call, ctx: Context) -> bool | None | str:
    """The value of a call on a submodule, or ``"no"`` when ``call`` is not one."""
    func = call.func
    if isinstance(func, ast.Name):
        return True if func.id in ctx.modules else "no"
    if isinstance(func, ast.Subscript):  # self.layers[i](h)
        owner = func.value
        is_sub = isinstance(owner, ast.Attribute) and _is_self(owner.value)
        return True if is_sub else "no"
    if not isinstance(func, ast.Attribute) or not _is_self(func.value):
        key = held_key(func, ctx)
        calls = ctx.calls
        if key and calls is not None and calls.keyed is not None and calls.keyed(key):
            return False  # self.model.text_encoder(ids): a module of a dict it was handed
        return "no"
    facts = ctx.facts
    if func.attr in facts.methods:  # one of the class's own helpers: what it returns
        got = returned_values(call, ctx, value_of, 0)
        return got[0] if got else None
    if func.attr in facts.tensors:
        return None
    if func.attr in facts.passthrough or transform_layer(ctx, func.attr):
        # self.act = ACT2FN[...], self.rotate = v2.RandomAffine(...): its input's dtype
        return value_of(call.args[0], ctx) if call.args else None
    if call.args and _fp32_on_purpose(call.args[0], ctx):
        return None  # self.criterion(scores.float(), y): fp32 (no weights) or it raises
    return True


def _fp32_on_purpose(arg: ast.AST, ctx: Context) -> bool:
    """``x.float()``, ``x.to(torch.float32)``: an input made fp32 on purpose."""
    if not isinstance(arg, ast.Call) or not isinstance(arg.func, ast.Attribute):
        return False
    return value_of(arg, ctx) is None and ctx.is_upcast(arg)


def _call_value(call: ast.Call, ctx: Context) -> bool | None:
    sub = _submodule_value(call, ctx)
    if sub != "no":
        return None if isinstance(sub, str) else sub
    func = call.func
    if dotted(func) in ctx.imports.einops and call.args:
        # einops.einsum(a, b, "...") / reduce(t, "...", "sum"): the tensors' promoted dtype
        tensors = [a for a in call.args if not isinstance(a, ast.Constant)]
        return _join([value_of(a, ctx) for a in tensors])
    if dotted(func) in _REARRANGES and call.args:
        return value_of(call.args[0], ctx)  # einops: the same values, rearranged
    if isinstance(func, ast.Name):
        if func.id in ctx.floating and not call.args:
            return ctx.floating[func.id]  # d() of a parameter bound to `lambda: t`
        return _helper_value(call, ctx)
    if not isinstance(func, ast.Attribute):
        return None
    args = [_unlist(x) for x in (*call.args, *(k.value for k in call.keywords))]
    owner = dotted(func.value)
    imports = ctx.imports
    if owner in imports.torch or owner in imports.functional or owner.endswith("nn.functional"):
        if func.attr in LOSSES:  # F.cross_entropy(logits, labels): in the logits' dtype
            # logits the lint cannot see (unpacked from a list of pairs): the model's, guessed
            return (value_of(args[0], ctx) or False) if args else None
        if func.attr in _MADE and func.attr not in _TORCH_KEEPS:
            return _made_as(call, ctx)  # torch.zeros(n, dtype=h.dtype): h's
        if func.attr.endswith("_like") and any(k.arg == "dtype" for k in call.keywords):
            return _made_as(call, ctx)  # torch.ones_like(ids, dtype=torch.float): fp32
        if func.attr not in _FLOAT_RESULT and func.attr not in _TORCH_KEEPS:
            return None
        joined = _join([value_of(a, ctx) for a in args])
        # torch.exp(ids.float()) is fp32 in a half model too: floating in the model's dtype
        # only when an operand is
        return True if joined is not None and func.attr in _FLOAT_RESULT else joined
    receiver = value_of(func.value, ctx)
    if func.attr in ("float", "double") and not call.args:
        return None  # fp32 on purpose (HP201), in a half model too: not the model's dtype
    if func.attr in ("to", "type"):
        return _to_value(call, receiver, ctx)
    if receiver is None and func.attr in _ARITHMETIC and not _fp32_factory(func.value, ctx):
        return _join([value_of(a, ctx) for a in args])  # g.sub(h): as g - h, h's dtype
    if receiver is None:
        return None
    if func.attr in _FLOAT_RESULT:
        return True
    if func.attr in _KEEPS_DTYPE and not any(k.arg == "dtype" for k in call.keywords):
        return receiver
    if func.attr == "get" and call.args:
        return receiver  # batch.get("x", default): a tensor of the batch (the default aside)
    return None


_MADE = words("zeros ones empty full rand randn linspace logspace eye tensor as_tensor")


def _made_as(call: ast.Call, ctx: Context) -> bool | None:
    """``torch.zeros(n, dtype=h.dtype)`` (also ``full``, ``rand``, ...): a tensor in
    ``h``'s dtype, floating where ``h`` is; None for any other ``dtype=``."""
    dtype = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if not (isinstance(dtype, ast.Attribute) and dtype.attr == "dtype"):
        return None
    return value_of(dtype.value, ctx)


def _helper_value(call: ast.Call, ctx: Context) -> bool | None:
    """``f(x, lambda: t)`` of a function of this file: its ``return`` expressions judged
    with its parameters bound to the values passed (a lambda's to its body's), one call
    deep; floating when one of them is (``default(v, lambda: torch.randn_like(x))``)."""
    calls = ctx.calls
    if calls is None or not isinstance(call.func, ast.Name):
        return None
    fn = calls.program.functions.get(call.func.id)
    if fn is None:
        return _imported_value(call, call.func.id, ctx)
    bound: dict[str, bool] = {}
    a = fn.args
    for param in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        arg = argument_for(fn, call, param, False)
        if isinstance(arg, ast.Lambda):
            arg = arg.body
        value = value_of(arg, ctx) if arg is not None else None
        if value is not None:
            bound[param.arg] = value
    if not bound:
        return None
    inner = replace(ctx, floating=bound, outputs=set(), modules={}, calls=None, _at={})
    return _join([value_of(r, inner) for r in calls.returns(fn)])


def _imported_value(call: ast.Call, name: str, ctx: Context) -> bool | None:
    """``compute_amplitude(waveforms, lengths)`` of a function another file of the tree
    defines, given a proved floating tensor first, or a size first (an int: ``logp(dim, u,
    j)``) and floating tensors after it: its ``return`` values where it is walked
    with the floating values this call passes (``out = torch.mean(waveforms ** 2, ...)``,
    then ``return out``). Other calls are not looked up: reading the other file costs."""
    calls = ctx.calls
    if calls is None or calls.function is None:
        return None
    if not call.args or not isinstance(ctx.parents.get(id(call)), ast.Assign):
        return None  # only a result bound to a name is looked up (reading the file costs)
    first = call.args[0]
    sized = int_scalar(first) or isinstance(first, ast.Name) and int_bound(first.id, ctx.function)
    if value_of(first, ctx) is not True and not (
        sized and any(value_of(a, ctx) is not None for a in call.args[1:])
    ):
        return None  # nor one given anything but an activation, or a size and then tensors
    found = calls.function(name)
    if found is None:
        return None
    there, fn = found
    bound: dict[str, bool] = {}
    a = fn.args
    for param in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        arg = argument_for(fn, call, param, False)
        value = value_of(arg, ctx) if arg is not None else None
        if value is not None:
            bound[param.arg] = value
    if not bound or id(fn) in there.busy:
        return None
    there.busy.add(id(fn))
    try:
        inner = there.given(fn, bound)
        return _join([value_of(r, inner.at(r)) for r in there.returns(fn)])
    finally:
        there.busy.discard(id(fn))


def _to_value(call: ast.Call, receiver: bool | None, ctx: Context) -> bool | None:
    """``.to(...)``/``.type(...)``: proved for ``torch.float32`` or a proved tensor's dtype;
    not floating for an integer or another floating dtype; the receiver's for a device."""
    wanted = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
    result = receiver
    for arg in wanted:
        if isinstance(arg, ast.Attribute) and arg.attr == "dtype":
            return value_of(arg.value, ctx)
        last = arg.attr if isinstance(arg, ast.Attribute) else ""
        if last in _FP32 and dotted(arg).split(".")[0] in ctx.imports.torch:
            return None  # fp32 on purpose, as .float()
        if last in _NOT_FLOAT or (isinstance(arg, ast.Name) and arg.id in ("int", "bool")):
            return None
        device = (isinstance(arg, ast.Attribute) and arg.attr in _DEVICE_ATTRS) or (
            isinstance(arg, ast.Constant) and isinstance(arg.value, str)
        )
        if not device and receiver is not None:
            result = False  # .to(something): a dtype or a device, not known which
    return result


def template_for(call: ast.Call, ctx: Context) -> Template | None:
    """The template of a factory ``call``: a floating tensor whose ``.shape``, ``.size()``,
    ``.device`` or ``.dtype`` the call reads (so it surely is a tensor there), else the
    floating name bound most recently; never a name shown to be no tensor (:mod:`.anchors`)."""
    for arg in (*call.args, *(k.value for k in call.keywords)):
        for node in walk(arg):
            if not isinstance(node, ast.Attribute) or node.attr not in _TENSOR_FACTS:
                continue
            text = dotted(node.value)
            if text.split(".")[0] in ctx.not_tensors:
                continue  # out["x"].shape: out is a dict, never an anchor
            known = value_of(node.value, ctx) if text else None
            if known is not None:
                return Template(text, known)
    template = template_at(call, ctx)
    if template is None:
        return None  # None on this path, or not bound yet (see .receivers)
    return Template(template, ctx.template_known)


# -- inputs ---------------------------------------------------------------------------------
def _annotation(ann: ast.expr | None) -> tuple[ast.expr | None, bool]:
    """The annotation with ``Optional[...]``/``... | None`` taken off, and whether it was."""
    if isinstance(ann, ast.Subscript) and dotted(ann.value).endswith("Optional"):
        return ann.slice, True
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        for this, other in ((ann.left, ann.right), (ann.right, ann.left)):
            if isinstance(other, ast.Constant) and other.value is None:
                return this, True
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            return _annotation(ast.parse(ann.value, mode="eval").body)
        except SyntaxError:
            return None, False
    return ann, False


def _tensor_or_tensors(ann: ast.expr | None) -> bool:
    """``Union[Tensor, Dict[NodeType, Tensor]]``: a tensor, or containers of tensors (a
    homogeneous graph's features or a heterogeneous one's per type): a tensor when it is one."""
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        members = [ann.left, ann.right]
    elif isinstance(ann, ast.Subscript) and dotted(ann.value).endswith("Union"):
        members = list(ann.slice.elts) if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    else:
        return False
    bare = [m for m in members if dotted(m) in ("torch.Tensor", "Tensor")]
    rest = [m for m in members if dotted(m) not in ("torch.Tensor", "Tensor")]
    return bool(bare) and all(_of_tensors(m) for m in rest)


def _of_tensors(ann: ast.expr) -> bool:
    """``Dict[str, Tensor]``, ``List[Tensor]``: a container whose items are tensors."""
    if not isinstance(ann, ast.Subscript):
        return False
    items = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    return bool(items) and dotted(items[-1]) in ("torch.Tensor", "Tensor")


_TENSOR_DICTS = frozenset({"TensorDictBase", "TensorDict"})


def _input_value(arg: ast.arg, first: bool) -> bool | None:
    """An input's value from its annotation, its name, and whether it is ``forward``'s
    first positional input (proved floating unless it says otherwise)."""
    name = arg.arg
    ann, _ = _annotation(arg.annotation)
    text = "Tensor" if _tensor_or_tensors(ann) else dotted(ann) if ann is not None else ""
    if text.endswith("FloatTensor"):
        return True
    if text.rsplit(".", 1)[-1] in _TENSOR_DICTS:
        return None  # forward(td): a TensorDict of the model's tensors
    if ann is not None and text not in ("torch.Tensor", "Tensor"):
        return None  # LongTensor, int, bool, a tuple...
    if INDEX_NAME.search(name):
        return None
    if first:
        return True
    if ann is not None or name in _ACTIVATION_NAMES:
        return False
    return False if name.endswith(("_states", "_embeds", "hidden")) else None


def activation_input(arg: ast.arg) -> bool:
    """Whether ``arg`` would be a floating input as ``forward``'s first positional one."""
    return _input_value(arg, True) is not None


def floating_params(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, is_forward: bool
) -> tuple[dict[str, bool], dict[str, bool]]:
    """The floating inputs of ``fn``, and those that default to None (floating once tested
    not None)."""
    pairs = parameters(fn)
    positional = [*fn.args.posonlyargs, *fn.args.args]
    first = next((p for p in positional if p.arg not in ("self", "cls")), None)
    out: dict[str, bool] = {}
    optional: dict[str, bool] = {}
    for arg, default in pairs:
        if arg.arg in ("self", "cls"):
            continue
        value = _input_value(arg, is_forward and arg is first)
        if value is None:
            continue
        none = isinstance(default, ast.Constant) and default.value is None
        (optional if none else out)[arg.arg] = value
    return out, optional
