"""Where a tensor made fp32 in forward goes: the one question every dtype finding answers.

A tensor that a factory makes fp32 (``torch.zeros(n)``) or that an upcast makes fp32
(``x.float()``) is a leak only if, in a model converted to half, it carries fp32 into a
floating op with a half tensor, or into the module's output. :func:`fate_of` follows it
forward through the expression around it, and through every later use of a name it is
bound to, until each path ends:

- *cast*: ``.to(x.dtype)``, ``.to(dtype=...)``, ``.type_as(x)``, ``.half()``, ``.long()``,
  ``.bool()``, stored into a slice of another tensor (``h[:, 0] = t`` casts to h's dtype);
- *integer use*: an index (``a[t]``), a sort key (``argsort``/``topk``...), a counter
  (``t += 1``, ``t.index_add_(...)``), a comparison, a shape or an element read
  (``.item()``, ``.tolist()``, ``t.shape``);
- *meets half*: arithmetic, ``torch.cat``/``matmul``... or an in-place op with a floating
  tensor of the model's dtype, the first input of a submodule, the state (``hx``, the
  second input) of a recurrent layer (``nn.LSTM``/``GRU``/``RNN``), the grid of
  ``grid_sample`` on a half input, or ``return`` from ``forward``: the leak;
- *into a call of this file* (a function, a method, the ``forward`` of a submodule whose
  class is defined here, also through ``self.blocks[i](...)`` or a loop over a
  ``ModuleList`` of one such class): followed through the parameter that receives it, and
  back out through ``return`` into the caller;
- *kept as an attribute* (``self.mask = t``): followed on at every read of ``self.mask`` in
  the methods of its class;
- *unknown*: passed to a function the lint cannot see into: not reported.

A name bound in one branch of an ``if`` is not rebound by the other branch: the later uses
after the ``if`` still read it.

Values met are judged as :mod:`.values` judges them at the statement of the use. An
explicit upcast (``g.float()``) is fp32 on purpose, so meeting one is not meeting half:
``(x.float() + g.float() * y.float()).to(dtype=x.dtype)`` stays fp32 until it is cast back.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from halfprec.leaks.lint.callers import flag_guards
from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.reach import Fate, Follow, enter, to_callers, to_readers
from halfprec.leaks.lint.scalars import zero_dim, zero_dim_factory
from halfprec.leaks.lint.submodules import hidden_state, is_submodule, submodule
from halfprec.leaks.lint.values import value_of
from halfprec.leaks.lint.wrappers import wrapped

_MAX_HOPS = 12  # names followed from one tensor (a = t; b = a * 2; ...)
_FACTS = words("shape size device dtype ndim numel dim is_cuda nelement is_floating_point")
_ELEMENT = words("item tolist numpy __len__ all any")
_CASTS = words("half bfloat16 type_as")
_INTEGER_CASTS = words("long int bool byte short char")
_UPCASTS = words("float double")
_SORTS = words(
    "argsort sort topk argmax argmin multinomial bincount searchsorted bucketize nonzero "
    "unique unique_consecutive kthvalue msort argwhere"
)
_INT_ARGS = words("gather index_select take take_along_dim masked_select")
_COUNTERS = words("index_add_ scatter_add_ scatter_reduce_ index_put_ put_ scatter_")
_KEEPS = words(
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
    "unfold"
)
_FILLS = words(
    "uniform_ normal_ bernoulli_ exponential_ random_ fill_ geometric_ log_normal_ cauchy_"
)
_TAKES = words("values items pop popleft get copy")
_REDUCTIONS = words("sum mean max min amax amin prod norm std var logsumexp")
_TORCH_SAFE = words("isfinite isnan isinf is_tensor numel is_floating_point equal allclose")
_BUILTIN_SAFE = words("len int float bool print isinstance range list tuple str repr hash callable")


class _Follow:
    """One walk forward from a created tensor; the names followed are remembered so that a
    loop (``t = t * 2``) ends."""

    def __init__(self, ctx: Context, upcast: bool, one_dim: bool) -> None:
        self.ctx = ctx
        self.upcast = upcast
        self.one_dim = one_dim
        self.caller: tuple[Follow, ast.Call] | None = None  # where a callee returns to
        self.depth = 0
        self.element: int | None = None  # returned as this element of a tuple
        self.scalar = False  # 0-dim here: it promotes only a 0-dim half operand
        self.zero = False  # made 0-dim (torch.tensor(0.)): reaching the output is no leak
        self.opaque = False  # the result of a callee the lint cannot see: only a cast ends it
        self.thunk = False  # the body of a lambda: calling it hands the value on
        self.empty = False  # no elements (torch.empty(0)): only a join carries its dtype on
        self.chosen = False  # cast to fp32 on purpose on the way (mask.to(torch.float))
        self.mixed = False  # joined with half tensors (cat([t, h])): only a cast ends it well
        self.key: str | None = None  # the key it is kept under in a dict ({"mask": t})
        self.names: set[str] = set()  # the names followed in this function
        self.attrs: set[str] = set()  # the attributes followed (self.mask = t)
        self.guards: list[ast.arg] = []  # flags off by default that the tensor is made under
        self.fate = Fate()
        self.seen: set[tuple[str, int]] = set()
        self.hops = 0

    def spawn(self, ctx: Context) -> _Follow:
        """A walk on from here in another function: the same kind of tensor, no names yet."""
        follow = _Follow(ctx, self.upcast, False)
        follow.zero, follow.mixed = self.zero, self.mixed
        return follow

    def floating(self, node: ast.AST) -> bool:
        """Whether ``node`` is a floating tensor of the model's dtype where it is used."""
        return value_of(node, self.ctx.at(node)) is not None

    def meets(self, others: Sequence[ast.AST], join: bool = False) -> str:
        """The step when the tensor meets ``others`` in one floating op: a leak if one is
        half; ``"safe"`` for a factory's tensor meeting an explicit upcast (the result is
        fp32 because of the upcast, which is HP201's to judge); else it goes on. A tensor
        with no elements meets nothing but in a join: ``torch.cat([torch.empty(0), h])``
        is fp32, while an op on it gives no values or raises. A complex tensor (see
        :mod:`.complexes`) is never half: the result is complex because of it."""
        if self.empty and not join:
            return "safe"
        others = [o for o in others if not self.derived(o)]
        if self.scalar:  # 0-dim: only another 0-dim tensor (h.mean()) takes its dtype
            if any(self.half_scalar(o) for o in others):
                return "leak"
            # with literal numbers only (softplus(lam), lam * 2) it stays a 0-dim fp32
            # tensor and goes on; a tensor with dimensions takes its own dtype
            return "up" if all(_literal(o) for o in others) else "safe"
        if any(isinstance(o, ast.Name) and o.id in self.ctx.complex for o in others):
            return "safe"  # mask * spec: complex, in a half model too
        if any(self.floating(o) for o in others):
            if join:  # cat([t, h]).to(h.dtype) gives what cat([t.to(h.dtype), h]) gives
                self.mixed, self.empty = True, False
                return "up"
            return "leak"
        if not self.upcast and any(self.ctx.is_upcast(o) for o in others):
            return "safe"
        self.empty = self.empty and not join  # cat([t, h]) has h's elements in t's dtype
        return "up"

    def half_scalar(self, node: ast.AST) -> bool:
        """Whether ``node`` is a 0-dim floating tensor of the model's dtype (a loss)."""
        return self.floating(node) and zero_dim(node, self.ctx.at(node))

    def derived(self, node: ast.AST) -> bool:
        """Whether ``node`` reads a name this walk follows here: the tensor met with a value
        made from itself (``torch.stack([out.cos(), -out.sin()])``) meets no half tensor."""
        if not self.names and not self.attrs:
            return False
        for n in walk(node):
            if self.reads_followed(n):
                return True
            bound = self.ctx.binding_before(n) if isinstance(n, ast.Name) else None
            if bound is not None and any(self.reads_followed(m) for m in walk(bound)):
                return True  # s = torch.sin(out) before the walk has reached s
        return False

    def reads_followed(self, n: ast.AST) -> bool:
        """Whether ``n`` is a name or a ``self`` attribute this walk follows."""
        if isinstance(n, ast.Name):
            return n.id in self.names
        return (
            isinstance(n, ast.Attribute)
            and n.attr in self.attrs
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
        )

    def climb(self, node: ast.AST) -> None:
        """Follow the value of ``node`` up through the expressions that contain it."""
        parents, opaque, chosen, mixed = self.ctx.parents, self.opaque, self.chosen, self.mixed
        try:
            self._climb(node, parents)
        finally:
            self.opaque = opaque  # an unseen callee on this path does not hide the others
            self.chosen = chosen  # nor a cast to fp32 on this path
            self.mixed = mixed  # nor a join with half tensors

    def _climb(self, node: ast.AST, parents: dict[int, ast.AST]) -> None:
        while not self.fate.leaks:
            parent = parents.get(id(node))
            mixed = self.mixed
            step = _step(self, node, parent) if parent is not None else "unknown"
            if mixed and step != "done" and not _cast_back(step, parent, node):
                self.fate.leaks = True  # half values joined into fp32, going on uncast
                return
            if step == "up":
                assert parent is not None
                node = parent
                if isinstance(parent, ast.Attribute) and _called(self, parent):
                    node = parents[id(parent)]  # t.view(...): the call's value goes on
                    self.one_dim = self.one_dim and parent.attr.endswith("_")
                    self.scalar = self.scalar and _keeps_rank(parent.attr, self.zero)
                continue
            if step == "unknown" or step == "leak" and self.opaque:
                self.fate.unknown = True
            elif step == "leak":
                self.fate.leaks = True
            elif step == "integer":
                self.fate.integer = True
            return

    def follow_name(self, name: str, bound_at: ast.AST) -> None:
        """Follow every later use of ``name``, bound by the statement ``bound_at``."""
        key = (name, id(bound_at))
        self.names.add(name)  # made from the tensor, followed or not
        if key in self.seen or self.hops >= _MAX_HOPS:
            self.fate.unknown = self.fate.unknown or key not in self.seen
            return
        self.seen.add(key)
        self.hops += 1
        for use in self.ctx.uses_after(name, bound_at):
            self.climb(use)
            if self.fate.leaks:
                return


def _literal(node: ast.AST) -> bool:
    """``2.0``, ``-1``: a number written in the source."""
    while isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant)


def fate_of(node: ast.AST, ctx: Context, upcast: bool = False) -> Fate:
    """Where the fp32 tensor made at ``node`` goes (see the module docstring); ``upcast``:
    it was made by an explicit upcast (HP2), not a factory (HP101)."""
    follow = _Follow(ctx, upcast, _vector(node))
    follow.empty = _no_elements(node)
    follow.zero = follow.scalar = _scalar_factory(node, ctx)
    if isinstance(ctx.function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        follow.guards = flag_guards(ctx.function, node, ctx.parents)
    follow.climb(node)
    return follow.fate


def _scalar_factory(node: ast.AST, ctx: Context) -> bool:
    """``torch.tensor(0.)``, ``torch.zeros(())``: a factory of a 0-dim tensor."""
    if not isinstance(node, ast.Call):
        return False
    kind = ctx.is_torch_attr(node.func, "tensor", "zeros", "ones", "empty", "full", "rand", "randn")
    return kind is not None and zero_dim_factory(kind, node)


def _no_elements(node: ast.AST) -> bool:
    """``torch.empty(0)``, ``torch.zeros([0], d)``, ``torch.tensor([])``: a placeholder."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    last = dotted(node.func).rsplit(".", 1)[-1]
    sizes = node.args[:1] if last == "full" else node.args
    if isinstance(sizes[0], (ast.Tuple, ast.List)):
        if not sizes[0].elts:
            return last == "tensor"  # torch.tensor([])
        sizes = sizes[0].elts
    if last not in _SIZED:
        return False
    return any(isinstance(a, ast.Constant) and type(a.value) is int and a.value == 0 for a in sizes)


_SIZED = words("zeros ones empty rand randn full")


def _vector(node: ast.AST) -> bool:
    """``torch.ones(3)``: a factory of one dimension (``w[0]`` of it is 0-dim)."""
    if not isinstance(node, ast.Call) or len(node.args) != 1:
        return False
    size = node.args[0]
    if isinstance(size, (ast.Tuple, ast.List)):
        if len(size.elts) != 1:
            return False
        size = size.elts[0]
    # x.shape or x.size() may have any number of dimensions; x.shape[-1] or n is one
    return isinstance(size, (ast.Constant, ast.Name, ast.BinOp, ast.Subscript)) or (
        isinstance(size, ast.Call) and bool(size.args)
    )


def _step(f: _Follow, node: ast.AST, parent: ast.AST) -> str:
    """One step up from ``node`` into ``parent``: ``"up"`` (the value goes on as fp32),
    ``"safe"``, ``"integer"``, ``"leak"``, ``"unknown"``, or ``"done"`` (names followed)."""
    if isinstance(parent, ast.Attribute):
        return _attribute(f, node, parent)
    if isinstance(parent, ast.BinOp):
        other = parent.right if parent.left is node else parent.left
        if isinstance(node, (ast.Tuple, ast.List)) or isinstance(other, (ast.Tuple, ast.List)):
            return "up"  # (loss,) + outputs: a longer tuple, no arithmetic
        return f.meets([other])
    if isinstance(parent, (ast.UnaryOp, ast.Starred, ast.Await)):
        return "up"
    if isinstance(parent, ast.IfExp):
        return "safe" if parent.test is node else "up"
    if isinstance(parent, ast.Lambda):
        f.thunk = True  # default(v, lambda: t): whoever calls the lambda gets t
        return "up"
    if isinstance(parent, ast.Call) and parent.func is node:
        thunk, f.thunk = f.thunk, False
        return "up" if thunk else "unknown"
    if isinstance(parent, (ast.Compare, ast.BoolOp, ast.JoinedStr, ast.FormattedValue)):
        return "safe"
    if isinstance(parent, ast.Subscript):
        if parent.value is not node:
            return "integer"
        if f.key is not None and isinstance(parent.slice, ast.Constant):
            return _field(f, parent.slice.value)  # kwargs["mask"] of a dict holding t
        element = isinstance(parent.slice, ast.Constant) and isinstance(parent.slice.value, int)
        f.scalar = f.scalar or (element and f.one_dim)  # w[0] of a vector: 0-dim
        return "up"
    if isinstance(parent, (ast.Index, ast.Slice)):  # pragma: no cover - Python < 3.9 shapes
        return "integer"
    if isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        kept = parent.value if isinstance(parent, ast.DictComp) else parent.elt
        return "up" if kept is node else "unknown"  # [torch.ones(n) for ...]: a list of t
    if isinstance(parent, ast.Dict):
        if node not in parent.values:
            return "unknown"
        key = parent.keys[parent.values.index(node)]
        f.key = key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        return "up"  # {"mask": t}: the dict holds t
    if isinstance(parent, (ast.List, ast.Tuple)):
        if _joins(f, parent):
            return f.meets([e for e in parent.elts if e is not node], join=True)
        if isinstance(f.ctx.parents.get(id(parent)), ast.Return) and node in parent.elts:
            f.element = parent.elts.index(node)  # return a, t: the caller's second name
        return "up"
    if isinstance(parent, ast.keyword):
        call = f.ctx.parents.get(id(parent))
        return _argument(f, node, call) if isinstance(call, ast.Call) else "unknown"
    if isinstance(parent, ast.Call):
        return _argument(f, node, parent)
    return _statement(f, node, parent)


def _cast_back(step: str, parent: ast.AST | None, node: ast.AST) -> bool:
    """After a join with half tensors: the joined value cast (``.to(h.dtype)``, ``.half()``,
    ``.long()``), or reshaped on its way to a cast. A read of its shape alone is not a cast:
    the join itself met half tensors."""
    if _reshaped(node, parent):
        return True
    method = parent.attr if isinstance(parent, ast.Attribute) else ""
    return step in ("safe", "integer") and method in _CAST_METHODS


_CAST_METHODS = words("to type half bfloat16 type_as long int bool byte short char")


def _reshaped(node: ast.AST, parent: ast.AST | None) -> bool:
    """``parent`` reshapes the value it holds (``.view(...)``), or is the join ``node`` (a
    list) goes into."""
    if isinstance(node, (ast.List, ast.Tuple)) and isinstance(parent, ast.Call):
        return True  # torch.cat([t, h]): the joined value is the call's
    return isinstance(parent, ast.Attribute) and parent.attr in _RESHAPES | _TRANSPOSES


_TRANSPOSES = words("transpose permute contiguous squeeze movedim swapaxes T mT")


def _keeps_rank(method: str, zero: bool) -> bool:
    """Whether a 0-dim tensor stays 0-dim through ``t.<method>(...)``: a reduction; for a
    0-dim factory's tensor, any method but a reshape (``.to(device)``, ``.sqrt()``)."""
    return method in _REDUCTIONS or zero and method not in _RESHAPES


_RESHAPES = words(
    "view reshape unsqueeze expand expand_as repeat flatten tile broadcast_to view_as "
    "reshape_as unflatten repeat_interleave"
)


def _joins(f: _Follow, seq: ast.List | ast.Tuple) -> bool:
    """``torch.cat([t, h])``: the pieces of the list meet (in ``return t, h`` they do not)."""
    outer = f.ctx.parents.get(id(seq))
    return isinstance(outer, ast.Call) and dotted(outer.func).rsplit(".", 1)[-1] in _JOINS


_JOINS = words("cat stack concat concatenate hstack vstack dstack column_stack")


def _attribute(f: _Follow, node: ast.AST, attr: ast.Attribute) -> str:
    """``t.<attr>`` or ``t.<method>(...)``."""
    name = attr.attr
    if name in _FACTS or name in _ELEMENT and not _called(f, attr):
        return "safe"
    if not _called(f, attr):
        if f.key is not None:
            return _field(f, name)  # out.logits of a record holding t as logits
        return "up" if name in ("T", "mT", "H", "mH", "data", "real", "imag") else "unknown"
    call = f.ctx.parents[id(attr)]
    assert isinstance(call, ast.Call)
    if name in _ELEMENT:
        return "safe"
    if name in ("to", "type"):
        step = _to(f, call)
        f.chosen = f.chosen or step == "fp32" and _an_input(f, node)
        return "up" if step == "fp32" else step
    if name in _CASTS:
        return "safe"
    if name in _INTEGER_CASTS or name in _SORTS:
        return "integer"
    if name in _COUNTERS:
        return "integer"
    if name in _UPCASTS:
        f.chosen = f.chosen or _an_input(f, node)
        return "up"
    if name.endswith("_") and isinstance(node, ast.Name):
        return "safe"  # buf.copy_(y), t.add_(h): the name's later uses say where it goes
    if name in _FILLS:
        return "up"  # t.uniform_(lo, hi): numbers drawn into t's own dtype, nothing met
    if name in _REDUCTIONS and not call.args and not call.keywords:
        f.scalar = True  # t.sum(): 0-dim
        return "up"
    if name in _KEEPS or name.startswith("new_"):
        return f.meets([*call.args, *(k.value for k in call.keywords)])
    if name in _TAKES and isinstance(node, ast.Name) and not f.floating(node):
        f.key = None
        return "up"  # pieces.pop(), bank.values(): what a followed list or dict holds
    return "unknown"


def _field(f: _Follow, name: object) -> str:
    """A field of a dict or record that holds the tensor under ``f.key``: the tensor itself
    when the names match, another value when they do not; ``out[0]`` of a record whose
    field order the lint does not know is unknown."""
    if name == f.key:
        f.key = None
        return "up"
    return "safe" if isinstance(name, str) else "unknown"


def _called(f: _Follow, attr: ast.Attribute) -> bool:
    call = f.ctx.parents.get(id(attr))
    return isinstance(call, ast.Call) and call.func is attr


def _to(f: _Follow, call: ast.Call) -> str:
    """``t.to(...)``: a cast unless it names fp32 (``"fp32"``) or only a device."""
    wanted = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
    if not wanted:
        return "up"  # .to(device=...) only
    torch_names = f.ctx.imports.torch
    fp32 = False
    for arg in wanted:
        text = dotted(arg)
        last = text.rsplit(".", 1)[-1]
        if text.split(".")[0] in torch_names and last in ("float32", "float", "float64", "double"):
            fp32 = True
            continue
        if last in _INTEGER_CASTS or last.startswith(("int", "uint", "long")):
            return "integer"
        if last == "device" or (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            continue
        if "device" in last.lower():
            continue
        return "safe"
    return "fp32" if fp32 else "up"


def _an_input(f: _Follow, node: ast.AST) -> bool:
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


def _argument(f: _Follow, node: ast.AST, call: ast.Call) -> str:
    """``t`` passed to ``call``."""
    func = call.func
    name = dotted(func)
    last = name.rsplit(".", 1)[-1] if name else ""
    owner = name.rsplit(".", 1)[0] if "." in name else ""
    others = [a for a in (*call.args, *(k.value for k in call.keywords)) if a is not node]
    if isinstance(func, ast.Name) and func.id in _BUILTIN_SAFE:
        return "safe"
    if isinstance(func, ast.Name) and func.id == "dict":
        if isinstance(node, ast.keyword):  # dict(mask=t): the dict holds t under "mask"
            f.key = node.arg
        return "up"
    if isinstance(func, ast.Attribute) and last in _STORES and node in call.args:
        return _store(f, func.value, call)
    if last == "update" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return _store(f, func.value, call)  # total.update(self._aux(...)): total holds it
    held = wrapped(f, node, call)
    if held is not None:
        return held  # nn.Parameter(t), self.register_buffer("m", t): module state made now
    if last.endswith("_like") and any(k.arg == "dtype" for k in call.keywords):
        return "safe"  # torch.zeros_like(t, dtype=torch.long): t gives only the shape
    if last in _SORTS or last in _TORCH_SAFE:
        return "integer" if last in _SORTS else "safe"
    if last == "grid_sample":
        f.fate.grid = f.fate.grid or (len(call.args) > 1 and call.args[1] is node)
        return f.meets(call.args[:1])
    if last in _INT_ARGS or last in _COUNTERS:
        # an index argument, or a counter's source: integer-ness matters; a half receiver
        # meeting an fp32 source is a dtype mismatch
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if receiver is not None and f.floating(receiver) and last in _COUNTERS:
            return "leak"
        return "integer"
    entered = enter(f, node, call)
    if entered is not None:
        return entered
    if _returned_record(f, node, call, last):
        return "up"  # return ModelOutput(logits=t): the output holds t
    first = bool(call.args) and call.args[0] is node
    if name in f.ctx.imports.einops:  # einops.einsum(t, h, "..."): promoted inputs' dtype
        return f.meets([a for a in call.args if a is not node and not isinstance(a, ast.Constant)])
    if _default(func, node, call):
        return "safe" if _read_before(f, func, call) else "up"  # batch.get("target", t)
    if last in _PASSES and first and (isinstance(func, ast.Name) or owner == "einops"):
        return "up"  # einops.rearrange(t, "b n -> n b"): the same values, rearranged
    if is_submodule(f.ctx, func):
        if first:
            return submodule(f, func)
        return "leak" if hidden_state(f.ctx, func, node, call) else "unknown"
    torch_call = owner in f.ctx.imports.torch or owner in f.ctx.imports.functional
    torch_call = torch_call or owner.endswith(("nn.functional", "torch.linalg", "torch.fft"))
    if torch_call or isinstance(func, ast.Attribute) and last in _KEEPS:
        receiver = func.value if isinstance(func, ast.Attribute) and not torch_call else None
        return f.meets(others if receiver is None else [*others, receiver])
    return "unknown"


def _default(func: ast.AST, node: ast.AST, call: ast.Call) -> bool:
    """``d.get(key, t)``, ``d.pop(key, t)``, ``getattr(obj, name, t)``: a default the call
    hands back when the key is missing."""
    args = call.args
    if isinstance(func, ast.Name) and func.id == "getattr":
        return len(args) == 3 and args[2] is node
    takes = isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault")
    return takes and len(args) == 2 and args[1] is node


def _read_before(f: _Follow, func: ast.AST, call: ast.Call) -> bool:
    """``batch["x"]`` read before ``batch.get("x", t)``: the key is there (or that read
    raised), so the default is never taken."""
    key = call.args[0]
    if not (isinstance(func, ast.Attribute) and isinstance(key, ast.Constant)):
        return False
    holder = ast.dump(func.value)
    here = (call.lineno, call.col_offset)
    for n in walk(f.ctx.function) if f.ctx.function is not None else ():
        if not (isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)):
            continue
        same = n.slice.value == key.value and ast.dump(n.value) == holder
        if same and (n.lineno, n.col_offset) < here:
            return True
    return False


_PASSES = words("rearrange repeat")
_STORES = words("append extend insert appendleft extendleft")  # list.append(t): it holds t


def _returned_record(f: _Follow, node: ast.AST, call: ast.Call, last: str) -> bool:
    """``return Output(logits=t)`` in a ``forward``: a class of another file, built and
    returned at once or bound to a name, holds ``t`` (as its field ``logits``)."""
    if not f.ctx.is_forward or not last[:1].isupper() or not any(c.islower() for c in last):
        return False
    held = f.ctx.parents.get(id(call))
    named = isinstance(held, ast.Assign) and all(isinstance(t, ast.Name) for t in held.targets)
    if not (isinstance(held, ast.Return) or named):
        return False  # out = Output(logits=t): followed on as the name out
    if isinstance(node, ast.keyword):  # the step from the keyword up to the call
        f.key = node.arg
    return True


def _store(f: _Follow, holder: ast.AST, call: ast.Call) -> str:
    """``pieces.append(t)``: ``pieces`` holds ``t`` from here on, so follow ``pieces`` (a
    ``self`` attribute into its reads). A floating tensor receiving it (never a list's
    method name) is not a holder."""
    if f.floating(holder):
        return "unknown"
    if isinstance(holder, ast.Name):
        f.follow_name(holder.id, _enclosing(f, call))
        return "done"
    if isinstance(holder, ast.Attribute) and to_readers(f, holder):
        return "done"
    return "unknown"


def _statement(f: _Follow, node: ast.AST, stmt: ast.AST) -> str:
    """``t`` reaches a statement: bound to names (followed), stored, returned."""
    if isinstance(stmt, (ast.Return, ast.Yield, ast.YieldFrom)):
        if f.caller is not None:  # followed into a call: its value goes on in the caller
            caller, call = f.caller
            caller.element, caller.key = f.element, f.key
            caller.climb(call)
            return "done"
        if to_callers(f):
            return "done"
        # a module's output, or a helper whose callers are in another file; one the model
        # casts to fp32 on purpose and meets no half tensor on the way (a loss from
        # mask.to(dtype=torch.float)) is fp32 by that cast, whatever the factory's dtype
        if f.ctx.is_forward and _holds_half(f.ctx):
            return "safe" if f.chosen and not f.upcast or f.zero else "leak"
        return "unknown"
    if isinstance(stmt, ast.Expr):
        return "safe"
    if isinstance(stmt, ast.NamedExpr):
        f.follow_name(stmt.target.id, _enclosing(f, stmt))
        return "up"
    if isinstance(stmt, ast.AugAssign):
        if stmt.target is node:
            if f.scalar and f.half_scalar(stmt.value):
                return "leak"  # loss += h.mean(): an fp32 loss of half terms
            return "integer" if _counts(stmt) else "safe"
        if isinstance(stmt.target, ast.Name) and stmt.target.id in f.ctx.complex:
            return "safe"  # spec *= mask: written into a complex tensor
        return "leak" if f.floating(stmt.target) else _bind(f, [stmt.target], stmt)
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return _bind(f, targets, stmt)
    if isinstance(stmt, (ast.For, ast.AsyncFor)) and stmt.iter is node:
        for sub in walk(stmt.target):  # for piece in pieces: each piece is one of them
            if isinstance(sub, ast.Name):
                f.follow_name(sub.id, stmt.iter)  # the body's uses come after the iterable
        return "done"
    return "unknown"


def _holds_half(ctx: Context) -> bool:
    """Whether a module's output has a half dtype to keep: its ``forward`` has a floating
    input, or its class a floating tensor or a submodule. A module made only of integers
    and shapes (a random-parameter generator) has none: its output is not the model's."""
    facts = ctx.facts
    return bool(ctx.floating or ctx.optional or facts.tensors or facts.layers or ctx.modules)


def _counts(stmt: ast.AugAssign) -> bool:
    """``t += 1``: an integer step on a counter."""
    v = stmt.value
    return isinstance(v, ast.Constant) and isinstance(v.value, int)


def _bind(f: _Follow, targets: Sequence[ast.expr], stmt: ast.stmt) -> str:
    element, f.element = f.element, None
    if element is not None and len(targets) == 1 and isinstance(targets[0], ast.Tuple):
        elts = targets[0].elts
        targets = [elts[element]] if element < len(elts) else []  # a, t = f(): only t
    for target in targets:
        if isinstance(target, ast.Subscript):
            # h[:, 0] = t writes t into h in h's own dtype; into an fp32 tensor it goes on
            if f.floating(target.value):
                continue
            base = target.value
            while isinstance(base, ast.Subscript) and not f.floating(base.value):
                base = base.value  # masks[k]["node"] = t: the dict of dicts holds t
            if isinstance(base, ast.Name):
                f.follow_name(base.id, stmt)
            elif isinstance(target.value, ast.Attribute) and not to_readers(f, target.value):
                f.fate.unknown = True  # self.masks[k] = t: the dict is read where t is
            continue
        if isinstance(target, ast.Attribute):
            if not to_readers(f, target):
                f.fate.unknown = True  # kept where the lint cannot see it read
            continue
        for sub in walk(target):
            if isinstance(sub, ast.Name):
                f.follow_name(sub.id, stmt)
    return "done"


def _enclosing(f: _Follow, node: ast.AST) -> ast.AST:
    parents = f.ctx.parents
    while not isinstance(node, ast.stmt) and id(node) in parents:
        node = parents[id(node)]
    return node
