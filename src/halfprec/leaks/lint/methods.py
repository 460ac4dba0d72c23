"""A followed tensor's own attributes and methods (see :mod:`.fate`): ``t.shape`` and
``t.item()`` read no values, ``t.to(x.dtype)``/``t.half()`` cast it, ``t.long()`` and
``t.argsort()`` make integers, ``t.view(...)`` and ``t * h``-like methods carry it on or meet
their operands, and a field of a dict or record holding it is the tensor or another value.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.asked import asked_cast, double_chain
from halfprec.leaks.lint.borrowed import made_in_dtype
from halfprec.leaks.lint.context import dotted, words
from halfprec.leaks.lint.devices import is_device
from halfprec.leaks.lint.heldvalues import held_values
from halfprec.leaks.lint.keyedstores import keyed_read
from halfprec.leaks.lint.reach import Follow
from halfprec.leaks.lint.scattered import scatter_step
from halfprec.leaks.lint.typed import fp32_default

_FACTS = words("shape size device dtype ndim numel dim is_cuda nelement is_floating_point")
_ELEMENT = words("item tolist numpy __len__ all any")
_CASTS = words("half bfloat16 type_as")
_PICKS = words("gather index_select take take_along_dim masked_select")
_INTEGER_CASTS = words("long int bool byte short char")
# a sparse tensor's index tensors: int64 whatever its values are
_SPARSE_INDICES = words("_indices indices crow_indices col_indices ccol_indices row_indices")
_UPCASTS = words("float double")
_FP32_NAMES = words("float32 float float64 double FloatTensor DoubleTensor")
SORTS = words(
    "argsort sort topk argmax argmin multinomial bincount searchsorted bucketize nonzero "
    "unique unique_consecutive kthvalue msort argwhere"
)
COUNTERS = words("index_add_ scatter_add_ scatter_reduce_ index_put_ put_ scatter_")
KEEPS = words(
    "view reshape transpose permute contiguous flatten unsqueeze squeeze expand expand_as "
    "repeat softmax log_softmax matmul bmm mm mean sum prod clone exp sqrt rsqrt pow tanh "
    "sigmoid relu masked_fill masked_fill_ narrow detach abs neg mul add sub div clamp "
    "clamp_ clamp_min clamp_max tril triu tril_ triu_ flip roll cumsum cumprod view_as "
    "reshape_as to_dense repeat_interleave movedim swapaxes unflatten cpu cuda fill_ zero_ "
    "add_ sub_ mul_ div_ pow_ exp_ log_ sqrt_ neg_ abs_ uniform_ normal_ bernoulli_ "
    "exponential_ cos sin log log1p log2 reciprocal floor ceil round trunc frac sign max min "
    "amax amin norm std var square erf erfinv lerp where outer ger cross t mT permute_ "
    "requires_grad_ pin_memory share_memory_ float_power fmod remainder expm1 diff diag "
    "diagonal diag_embed tile chunk split unbind select index_fill index_fill_ sigmoid_ "
    "tanh_ relu_ clone_ rot90 fliplr flipud sinc atan2 hypot logsumexp logaddexp cosh sinh "
    "acos asin atan maximum minimum einsum ge_ gt_ le_ lt_ eq_ ne_ masked_scatter lerp_ addcmul "
    "unfold _values coalesce"
)
_FILLS = words(
    "uniform_ normal_ bernoulli_ exponential_ random_ fill_ geometric_ log_normal_ cauchy_"
)
_TAKES = words("values items pop popleft get copy")
# a torch.distributions object's methods: its parameters' dtype meets the values given
_DRAWS = words("log_prob cdf icdf rsample sample entropy")
REDUCTIONS = words("sum mean max min amax amin prod norm std var logsumexp")
# ops whose dtype= keyword casts their input before computing: the result has that dtype
DTYPED = words(
    "cumsum cumprod sum mean prod nansum nanmean softmax log_softmax softmin norm "
    "vector_norm matrix_norm"
)


def attribute_step(f: Follow, node: ast.AST, attr: ast.Attribute) -> str:
    """``t.<attr>`` or ``t.<method>(...)``."""
    name = attr.attr
    if name == "dtype" and not f.upcast and not called(f, attr):
        made = made_in_dtype(attr, f.ctx)
        for tensor in made:
            f.climb(tensor)  # torch.zeros(n, dtype=t.dtype): fp32 as t is
        return "done" if made else "safe"
    if name in _FACTS or name in _ELEMENT and not called(f, attr):
        return "safe"
    if not called(f, attr):
        if f.key is not None:
            return record_field(f, name)  # out.logits of a record holding t as logits
        return "up" if name in ("T", "mT", "H", "mH", "data", "real", "imag") else "unknown"
    call = f.ctx.parents[id(attr)]
    assert isinstance(call, ast.Call)
    if name in _ELEMENT:
        return "safe"
    asked = not f.mixed and asked_cast(call, node, f.ctx)  # a join met half values first
    if not f.upcast and (double_chain(call, f.ctx) or asked):
        return "safe"  # .double(), or pe.type(torch.float32) of a computed value: see .asked
    if name in ("to", "type"):
        step = _to(f, call)
        f.chosen = f.chosen or step == "fp32" and _an_input(f, node)
        return "up" if step == "fp32" else step
    if name in _CASTS:
        return "safe"
    if name in _PICKS:
        return "up"  # t.gather(1, idx): t's values, picked
    if name in _INTEGER_CASTS or name in SORTS or name in _SPARSE_INDICES:
        return "integer"
    if name in COUNTERS:
        return scatter_step(f, call, name)  # buf.scatter_add_(0, idx, h): raises
    if name in _UPCASTS:
        f.chosen = f.chosen or _an_input(f, node)
        return "up"
    if name.endswith("_") and isinstance(node, ast.Name) and not _used(f, call, name):
        return "safe"  # buf.copy_(y), t.add_(h): the name's later uses say where it goes
    if name in _FILLS:
        return "up"  # t.uniform_(lo, hi): numbers drawn into t's own dtype, nothing met
    if name in REDUCTIONS and not call.args and not call.keywords:
        f.scalar = True  # t.sum(): 0-dim
        return "up"
    dtyped = dtype_keyword(f, call) if name in DTYPED else None
    if dtyped is not None:
        return dtyped  # mask.cumsum(1, dtype=x.dtype): the result is made in x's dtype
    if name in KEEPS or name.startswith("new_"):
        return f.meets([*call.args, *(k.value for k in call.keywords)])
    if name in _DRAWS:  # prior.log_prob(z): a distribution holding t scores z with it
        return f.meets([*call.args, *(k.value for k in call.keywords)])
    if name == "get" and isinstance(node, ast.Name):
        read = keyed_read(f, call)  # td.get(key) of a container holding t under a key
        if read is not None:
            return read
    if name in _TAKES and isinstance(node, ast.Name) and not f.floating(node):
        f.key = None
        return "up"  # pieces.pop(), bank.values(): what a followed list or dict holds
    if held_values(f, node, name):
        f.key = None
        return "up"  # self.means.items() of self.means[k] = t (see .heldvalues)
    return "unknown"


def _used(f: Follow, call: ast.Call, name: str) -> bool:
    """``return t.add_(h)``: an in-place op whose result is read on (not a statement of its
    own) carries the tensor on from there, like ``t + h``."""
    return name in KEEPS and not isinstance(f.ctx.parents.get(id(call)), ast.Expr)


def position(index: int) -> str:
    """The key of a tuple that holds the tensor as element ``index`` (``out = f()`` where
    ``f`` returns ``a, t``): not a string a dict key could spell."""
    return f"\0#{index}"


def record_field(f: Follow, name: object) -> str:
    """A field of a dict or record that holds the tensor under ``f.key``: the tensor itself
    when the names match, another value when they do not; ``out[0]`` of a record whose
    field order the lint does not know is unknown, of a tuple whose order it knows another
    element."""
    if name == f.key or isinstance(name, int) and f.key == position(name):
        f.key = None
        return "up"
    known = isinstance(name, int) and (f.key or "").startswith("\0#")
    return "safe" if isinstance(name, str) or known else "unknown"


def called(f: Follow, attr: ast.Attribute) -> bool:
    call = f.ctx.parents.get(id(attr))
    return isinstance(call, ast.Call) and call.func is attr


def dtype_keyword(f: Follow, call: ast.Call) -> str | None:
    """``t.cumsum(1, dtype=x.dtype)``, ``F.softmax(t, 1, dtype=d)``: the ``dtype=`` of an op
    in :data:`DTYPED` casts its result, as ``.to(...)`` would; ``None`` when it names no
    dtype, or fp32 (then the op carries fp32 on, as without the keyword)."""
    value = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if value is None or isinstance(value, ast.Constant):
        return None
    step = _dtypes(f, [value])
    return None if step in ("fp32", "up") else step


def _to(f: Follow, call: ast.Call) -> str:
    """``t.to(...)``: a cast unless it names fp32 (``"fp32"``) or only a device."""
    wanted = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
    if any(k.arg is None for k in call.keywords):
        return "safe"  # .to(**kwargs): may name a dtype
    if not wanted:
        return "up"  # .to(device=...) only
    return _dtypes(f, wanted)


def _dtypes(f: Follow, wanted: list[ast.expr]) -> str:
    """What the dtypes or devices ``wanted`` make of a tensor: ``"fp32"``, ``"integer"``,
    ``"safe"`` (a cast to another dtype) or ``"up"`` (devices only)."""
    torch_names = f.ctx.imports.torch
    fp32 = False
    for arg in wanted:
        text = dotted(arg)
        # xs[0].device: the attribute read counts, whatever it is read from
        last = arg.attr if isinstance(arg, ast.Attribute) else text.rsplit(".", 1)[-1]
        if text.split(".")[0] in torch_names and last in _FP32_NAMES:
            fp32 = True
            continue
        if fp32_default(arg, f.ctx):  # dtype=torch.float of a parameter no call passes
            fp32 = True
            continue
        if last in _INTEGER_CASTS or last.startswith(("int", "uint", "long")):
            return "integer"
        if is_device(arg, f.ctx):
            continue  # .to(get_module_device(self)): a move (see .devices)
        return "safe"
    return "fp32" if fp32 else "up"


def _an_input(f: Follow, node: ast.AST) -> bool:
    """Whether ``node`` names an input of the function: ``mask.to(torch.float)`` of an
    input that a factory only stands in for (``if mask is None: mask = torch.ones(n)``)
    makes whatever the caller passes fp32, so the factory's dtype changes nothing."""
    fn = f.ctx.function
    if not isinstance(node, ast.Name) or not isinstance(
        fn, (ast.FunctionDef, ast.AsyncFunctionDef)
    ):
        return False
    a = fn.args
    return any(p.arg == node.id for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))
