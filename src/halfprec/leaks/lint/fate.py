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

One step up from the tensor is taken here for an expression; :mod:`.methods` takes it for
the tensor's own methods, :mod:`.arguments` for a call it is passed to, :mod:`.statements`
for the statement it reaches, and :mod:`.reach` into other functions and attributes.

Values met are judged as :mod:`.values` judges them at the statement of the use. An
explicit upcast (``g.float()``) is fp32 on purpose, so meeting one is not meeting half:
``(x.float() + g.float() * y.float()).to(dtype=x.dtype)`` stays fp32 until it is cast back.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from halfprec.leaks.lint.alternatives import asked_alternative
from halfprec.leaks.lint.arguments import argument_step
from halfprec.leaks.lint.asked import asked_fill, asked_fp32, asked_write
from halfprec.leaks.lint.batched import batch_sized
from halfprec.leaks.lint.branches import needs_rank, rank_guarded
from halfprec.leaks.lint.callers import flag_guards
from halfprec.leaks.lint.comprehensions import comprehended
from halfprec.leaks.lint.context import Context, dotted, words
from halfprec.leaks.lint.elements import int_index, ranged_vector
from halfprec.leaks.lint.explicit import bound_upcast
from halfprec.leaks.lint.floated import floats_here, picks_elements, python_numbers
from halfprec.leaks.lint.holders import fed_half
from halfprec.leaks.lint.indexing import half_written_at
from halfprec.leaks.lint.islands import island_buffer, island_value
from halfprec.leaks.lint.methods import REDUCTIONS, attribute_step, called, record_field
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.reach import Fate, Follow
from halfprec.leaks.lint.scalars import integer_tensor, number_name, zero_dim, zero_dim_factory
from halfprec.leaks.lint.shapeonly import value_nodes
from halfprec.leaks.lint.sortkeys import order_only
from halfprec.leaks.lint.standins import stands_in
from halfprec.leaks.lint.statements import statement_step
from halfprec.leaks.lint.values import value_of
from halfprec.leaks.lint.writeback import written_back

_MAX_HOPS = 24  # names followed from one tensor (a = t; b = a * 2; ...)
OVERWRITTEN = "\0overwritten"  # the key of a dict field written over before it is read


class _Follow:
    """One walk forward from a created tensor; the names followed are remembered so that a
    loop (``t = t * 2``) ends."""

    def __init__(self, ctx: Context, upcast: bool, one_dim: bool) -> None:
        self.ctx = ctx
        self.upcast = upcast
        self.one_dim = one_dim
        self.batched = False  # one value per batch item (see .batched): a condition
        self.caller: tuple[Follow, ast.Call] | None = None  # where a callee returns to
        self.depth = 0
        self.element: int | None = None  # returned as this element of a tuple
        self.scalar = False  # 0-dim here: it promotes only a 0-dim half operand
        self.zero = False  # made 0-dim (torch.tensor(0.)): its own message at the output
        self.opaque = False  # the result of a callee the lint cannot see: only a cast ends it
        self.ranked = False  # on a path a test of its own rank chose (see .branches)
        self.thunk = False  # the body of a lambda: calling it hands the value on
        self.empty = False  # no elements (torch.empty(0)): only a join carries its dtype on
        self.chosen = False  # cast to fp32 on purpose on the way (mask.to(torch.float))
        self.mixed = False  # joined with half tensors (cat([t, h])): only a cast ends it well
        self.pieces = False  # held in a list with half tensors ([t, h], ts + [h]): a join mixes
        self.island = False  # a buffer of an fp32 island (see .islands): fp32 there is not half
        self.unsure = False  # of data of any dtype (torch.tensor(arrays)): only a strict op tells
        self.listed = False  # that data is Python numbers (a list[float]): fp32 once floating
        self.strict = False  # this step needs its inputs in one dtype (a layer's weights)
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
        follow.zero, follow.mixed, follow.island = self.zero, self.mixed, self.island
        follow.unsure, follow.listed = self.unsure, self.listed
        follow.ranked, follow.batched = self.ranked, self.batched
        return follow

    def floating(self, node: ast.AST) -> bool:
        """Whether ``node`` is a floating tensor of the model's dtype where it is used."""
        return value_of(node, self.ctx.at(node)) is not None and fed_half(self.ctx, node)

    def meets(self, others: Sequence[ast.AST], join: bool = False, total: bool = False) -> str:
        """The step when the tensor meets ``others`` in one floating op: a leak if one is
        half; ``"safe"`` for a factory's tensor meeting an explicit upcast (the result is
        fp32 because of the upcast, which is HP201's to judge); else it goes on. A tensor
        with no elements meets nothing but in a join: ``torch.cat([torch.empty(0), h])``
        is fp32, while an op on it gives no values or raises. A complex tensor (see
        :mod:`.complexes`) is never half: the result is complex because of it."""
        if self.empty and not join:
            return "safe"
        given = others
        others = [o for o in others if not self.derived(o)]
        if self.scalar:  # 0-dim: only another 0-dim tensor (h.mean()) takes its dtype
            if any(self.half_scalar(o) for o in others):
                return "leak"
            # with numbers (softplus(lam), self.weight * lam) or other 0-dim tensors of
            # any floating dtype it stays a 0-dim tensor, fp32 at least, and goes on; a
            # tensor with dimensions takes its own dtype, unless it is an integer tensor:
            # torch.arange(n) * torch.tensor(0.5) is an fp32 tensor with dimensions
            if any(integer_tensor(o, self.ctx) for o in others):
                self.scalar = False
                return "up"
            if total and self.total(others):
                return "up"  # loss + aux of a 0-dim total: a sum of losses, still 0-dim
            if any(self.half_dimensioned(o) for o in given):
                return "safe"  # remainder(x + c, 2 * c) of a 0-dim c: x + c is x's dtype
            return "up" if all(self.scalar_like(o) for o in others) else "safe"
        if any(isinstance(o, ast.Name) and o.id in self.ctx.complex for o in others):
            return "safe"  # mask * spec: complex, in a half model too
        if self.island:  # the upcast values meet the weights too: that is HP201's
            others = [o for o in others if not island_value(o, self.ctx)]
        if not self.upcast and any(bound_upcast(o, self.ctx.at(o)) for o in others):
            return "safe"  # grid + offsets of grid = g.float() + flow: fp32 by the upcast
        if not self.upcast and any(asked_fp32(o, self.ctx.at(o)) for o in others):
            return "safe"  # adj + torch.eye(n) of adj = torch.FloatTensor(...): see .asked
        if not self.upcast and any(self.asked_beside(o) for o in given if o not in others):
            return "safe"  # (z + t) * (1 - t) of z = h.float(): z's fp32 is asked for
        half = [o for o in others if self.floating(o)]
        if half and self.one_dim and all(self.half_scalar(o) for o in half):
            return "up"  # t * log2 of a vector t, 0-dim half log2: t keeps its dims and fp32
        if half:
            if self.unsure:
                return "unknown"  # integer data takes the half values' dtype there
            if join:  # cat([t, h]).to(h.dtype) gives what cat([t.to(h.dtype), h]) gives
                self.mixed, self.empty = True, False
                return "up"
            return "leak"
        if not self.upcast and any(_half_upcast(o, self.ctx) for o in others):
            return "safe"
        self.empty = self.empty and not join  # cat([t, h]) has h's elements in t's dtype
        return "up"

    def asked_beside(self, node: ast.AST) -> bool:
        """Whether ``node``, arithmetic that reads the followed tensor, also takes an
        operand that is not made from it and holds fp32 the library asks for (see
        :mod:`.asked`): ``z + t`` of ``z = h.float()``, fp32 whatever ``t`` is."""
        if isinstance(node, ast.BinOp):
            return self.asked_beside(node.left) or self.asked_beside(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.asked_beside(node.operand)
        return not self.derived(node) and asked_fp32(node, self.ctx.at(node))

    def scalar_like(self, node: ast.AST) -> bool:
        """A number or a 0-dim tensor: with a 0-dim fp32 tensor the result is 0-dim fp32."""
        ctx = self.ctx.at(node)
        return _literal(node) or number_name(node, ctx) or zero_dim(node, ctx)

    def total(self, others: Sequence[ast.AST]) -> bool:
        """Whether a 0-dim factory's tensor in ``forward`` bound to a running total
        (``loss += ...``, ``loss = loss + ...``) and added to ``others`` stays 0-dim: none
        of them reads a value proved to be the model's (an activation, a submodule's
        output, which has dimensions), so they are taken as losses too."""
        if not (self.zero and self.depth == 0 and self.ctx.is_forward):
            return False
        if not any(accumulated(self.ctx.function, name) for name in self.names):
            return False  # a constant (bias = torch.tensor(0.5)), not a running total
        ctx = self.ctx.at(others[0]) if others else self.ctx
        return not any(
            isinstance(n, (ast.Name, ast.Call, ast.Attribute)) and value_of(n, ctx) is True
            for o in others
            for n in walk(o)
        )

    def half_dimensioned(self, node: ast.AST) -> bool:
        """Whether ``node`` is a half tensor with dimensions, even one computed from the
        followed 0-dim tensor itself (``x + c``): a 0-dim fp32 operand keeps its dtype."""
        ctx = self.ctx.at(node)
        return self.floating(node) and not zero_dim(node, ctx) and not _literal(node)

    def half_scalar(self, node: ast.AST) -> bool:
        """Whether ``node`` is a 0-dim floating tensor of the model's dtype (a loss)."""
        return self.floating(node) and zero_dim(node, self.ctx.at(node))

    def derived(self, node: ast.AST) -> bool:
        """Whether ``node`` reads a name this walk follows here: the tensor met with a value
        made from itself (``torch.stack([out.cos(), -out.sin()])``) meets no half tensor."""
        if not self.names and not self.attrs:
            return False
        for n in value_nodes(node):  # not grid.shape[1] (see .shapeonly)
            if self.reads_followed(n):
                return True
            bound = self.ctx.binding_before(n) if isinstance(n, ast.Name) else None
            if bound is not None:
                bound = _filled(bound)  # h.masked_fill(m, t): h's dtype, t only fills it
            if bound is not None and any(self.reads_followed(m) for m in value_nodes(bound)):
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
        ranked, unsure, pieces = self.ranked, self.unsure, self.pieces
        try:
            self._climb(node, parents)
        finally:
            self.pieces = pieces  # nor a list of half pieces on this path
            self.unsure = unsure  # nor an op that made its data floating (see .floated)
            self.opaque = opaque  # an unseen callee on this path does not hide the others
            self.ranked = ranked  # nor a branch of its rank
            self.chosen = chosen  # nor a cast to fp32 on this path
            self.mixed = mixed  # nor a join with half tensors

    def _climb(self, node: ast.AST, parents: dict[int, ast.AST]) -> None:
        while not self.fate.leaks:
            parent = parents.get(id(node))
            mixed, self.strict = self.mixed, False
            step = _step(self, node, parent) if parent is not None else "unknown"
            if step == "leak" and self.unsure and not self.strict:
                step = "unknown"  # integer data would meet half values without a leak
            if mixed and step != "done" and not _cast_back(step, parent, node):
                self.fate.leaks = True  # half values joined into fp32, going on uncast
                return
            if step == "up":
                assert parent is not None
                if self.unsure and self.listed and floats_here(node, parent, self.ctx):
                    self.unsure, self.fate.floated = False, True
                node = parent
                if isinstance(parent, ast.Attribute) and called(self, parent):
                    node = parents[id(parent)]  # t.view(...): the call's value goes on
                    self.one_dim = self.one_dim and parent.attr.endswith("_")
                    self.scalar = self.scalar and _keeps_rank(parent.attr, self.zero)
                continue
            if step == "leak" and parent is not None and written_back(self, parent):
                return  # x[:, :n] = x[:, :n] + t: stored into half, no fp32 goes on
            if (
                step == "leak"
                and isinstance(parent, ast.BinOp)
                and order_only(self.ctx.at(parent), parent)
            ):
                step = "integer"  # argmax(h + w * t): only the indices go on
            if step == "unknown" or step == "leak" and (self.opaque or self.ranked):
                self.fate.unknown = True
            elif step == "leak":
                self.fate.leaks = True
            elif step == "integer":
                self.fate.integer = True
            return

    def follow_name(self, name: str, bound_at: ast.AST) -> None:
        """Follow every later use of ``name``, bound by the statement ``bound_at``."""
        # a 0-dim or rank-chosen value walks a name apart from the value itself: after
        # if c: s = s.max(), the name holds either
        # and a value through a callee the lint cannot see walks it apart from one seen all
        # the way: out = dict(img=g(t), noise=t) returns t itself too
        key = (
            f"{name}<{self.ranked:d}{self.scalar:d}{self.mixed:d}{self.opaque:d}>",
            id(bound_at),
        )
        self.names.add(name)  # made from the tensor, followed or not
        if key in self.seen or self.hops >= _MAX_HOPS:
            self.fate.unknown = self.fate.unknown or key not in self.seen
            return
        self.seen.add(key)
        self.hops += 1
        uses = self.ctx.uses_after(name, bound_at)
        if self.depth == 0:  # the next pass of a loop of the tensor's own function
            uses += self.ctx.loop_uses(name, bound_at)
        for use in uses:
            if self.scalar and needs_rank(self.ctx.parents, use, name, bound_at):
                continue  # if t.ndim > 0: t = t.view(...): a 0-dim value never runs it
            ranked, scalar, held = self.ranked, self.scalar, self.key
            self.ranked = ranked or rank_guarded(self.ctx.parents, use, name, bound_at)
            self.climb(use)
            self.ranked, self.scalar = ranked, scalar  # s = s.max() made s 0-dim, not s
            if self.key != OVERWRITTEN:  # cache["buf"] = v hides t from later reads
                self.key = held  # cache["a"] read here: cache["b"] on the next use is not t
            if self.fate.leaks:
                return
            if not self.upcast and asked_fill(use, bound_at, self.ctx):
                return  # m.index_add_(0, i, p.float() * w): later reads hold fp32 asked for


def _half_upcast(node: ast.AST, ctx: Context) -> bool:
    """An explicit upcast (see :meth:`.Context.is_upcast`) of values that may be half.
    ``(pos > 0).float()`` of a comparison or ``torch.arange(n).float()`` upcasts no half
    value: it is fp32 from integers, as a factory's tensor is, and what meets it goes on."""
    if not ctx.is_upcast(node, every_path=True):
        return False  # fp32 on purpose only on a path the read may not take (see .reaching)
    for _ in range(4):
        if not isinstance(node, ast.Name):
            break
        bound = ctx.binding_before(node)
        if bound is None:
            return True
        node = bound
    for sub in walk(node):
        func = sub.func if isinstance(sub, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr in ("float", "double", "to"):
            inner = func.value
            if value_of(inner, ctx.at(inner)) is None and not _opaque(inner, ctx):
                return False  # mask.float() of data the model never made half
            return not (isinstance(inner, ast.Compare) or integer_tensor(inner, ctx))
    return True


def accumulated(fn: ast.AST | None, name: str) -> bool:
    """Whether ``fn`` adds to ``name`` as a running total: ``name += v``, ``name -= v``,
    or ``name = name + v`` (a sum or difference that reads ``name``)."""
    for node in walk(fn) if fn is not None else ():
        if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
            if isinstance(node.target, ast.Name) and node.target.id == name:
                return True
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp):
            bound = [t.id for t in node.targets if isinstance(t, ast.Name)]
            reads = {n.id for n in walk(node.value) if isinstance(n, ast.Name)}
            if name in bound and name in reads and isinstance(node.value.op, (ast.Add, ast.Sub)):
                return True
    return False


def _opaque(node: ast.AST, ctx: Context) -> bool:
    """Whether ``node`` reads the result of a call of a function or module the lint does
    not judge (``self.head(x)``, ``helper(x)``): a value that may be half. A torch op or a
    tensor method of a value the lint knows as no floating tensor is not."""
    for sub in walk(node):
        if not isinstance(sub, ast.Call):
            continue
        func = sub.func
        if isinstance(func, ast.Name) or dotted(func).startswith("self."):
            return True
        owner = dotted(func.value) if isinstance(func, ast.Attribute) else ""
        if owner.startswith("self.") or owner == "self":
            return True
    return False


def _filled(node: ast.AST) -> ast.AST:
    """``h`` of ``h.masked_fill(mask, v)``, whose result has ``h``'s dtype whatever ``v``
    is; else ``node`` itself."""
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Attribute) and func.attr in _FILLS:
        return func.value
    return node


_FILLS = words("masked_fill masked_fill_ index_fill index_fill_")


def _literal(node: ast.AST) -> bool:
    """``2.0``, ``-1``: a number written in the source."""
    while isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant)


def fate_of(node: ast.AST, ctx: Context, upcast: bool = False) -> Fate:
    """Where the fp32 tensor made at ``node`` goes (see the module docstring); ``upcast``:
    it was made by an explicit upcast (HP2), not a factory (HP101)."""
    if not upcast and asked_alternative(node, ctx):
        return Fate()  # m = mask.float() if ... else torch.ones(n): see .alternatives
    follow = _Follow(ctx, upcast, _vector(node))
    follow.empty = _no_elements(node)
    follow.island = not upcast and island_buffer(node, ctx)
    follow.unsure = id(node) in ctx.unsure
    follow.listed = follow.unsure and python_numbers(node, ctx)
    follow.zero = _scalar_factory(node, ctx)
    follow.batched = not upcast and batch_sized(node, ctx)
    # 0-dim where it is made fp32 (torch.tensor(n) / k of an int n): with dimensioned half
    # tensors it keeps their dtype, as a 0-dim factory's tensor does
    follow.scalar = follow.zero or zero_dim(node, ctx.at(node))
    if isinstance(ctx.function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        follow.guards = flag_guards(ctx.function, node, ctx.parents)
    follow.climb(node)
    if follow.fate.unknown and not upcast and stands_in(node, ctx):
        follow.fate.leaks = True  # where a half caller's tensor would go (see .standins)
    return follow.fate


def _scalar_factory(node: ast.AST, ctx: Context) -> bool:
    """``torch.tensor(0.)``, ``torch.zeros(())``: a factory of a 0-dim tensor."""
    if not isinstance(node, ast.Call):
        return False
    kind = ctx.is_torch_attr(node.func, "tensor", "zeros", "ones", "empty", "full", "rand", "randn")
    facts, fn = ctx.facts, ctx.function
    return kind is not None and zero_dim_factory(kind, node, facts.float_lists, fn, ctx.parents)


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
    if ranged_vector(node):
        return True  # torch.logspace(-1, 0, n)
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
        return attribute_step(f, node, parent)
    if isinstance(parent, ast.BinOp):
        other = parent.right if parent.left is node else parent.left
        if isinstance(node, (ast.Tuple, ast.List)) or isinstance(other, (ast.Tuple, ast.List)):
            f.pieces = f.pieces or _half_pieces(f, other)  # ts[1:] + [h]: h is a piece too
            return "up"  # (loss,) + outputs: a longer tuple, no arithmetic
        return f.meets([other], total=isinstance(parent.op, (ast.Add, ast.Sub)))
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
        if isinstance(parent.ctx, ast.Store) and half_written_at(parent, f.floating, f.ctx):
            return "leak"  # t[idx] = h: index_put of half values into fp32 raises
        if isinstance(parent.ctx, ast.Store) and not f.upcast and asked_write(parent, f.ctx):
            return "safe"  # t[idx] = logits.float(): t holds the fp32 asked for (.asked)
        if f.key is not None and isinstance(parent.ctx, ast.Store):
            if isinstance(parent.slice, ast.Constant) and parent.slice.value == f.key:
                f.key = OVERWRITTEN  # cache["buf"] = v: later reads of "buf" read v
            return "safe"  # a write into the dict reads none of it
        if f.key is not None and isinstance(parent.slice, ast.Constant):
            return record_field(f, parent.slice.value)  # kwargs["mask"] of a dict holding t
        if _indices(node, parent):
            return "integer"  # torch.max(t, -1)[1]: the indices of the values
        element = int_index(parent.slice)
        f.scalar = f.scalar or (element and f.one_dim)  # w[0], w[len(xs)] of a vector: 0-dim
        f.one_dim = f.one_dim and not isinstance(parent.slice, ast.Tuple)  # w[None, :]
        # sigmas[idx] of data of any shape: maybe 0-dim, which keeps half operands half
        f.ranked = f.ranked or f.unsure and picks_elements(parent.slice)
        return "up"
    if isinstance(parent, (ast.Index, ast.Slice)):  # pragma: no cover - Python < 3.9 shapes
        return "integer"
    if isinstance(parent, ast.comprehension):
        return comprehended(f, node, parent)
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
        f.pieces = f.pieces or _half_pieces(f, parent)  # pieces = [t, h]
        if isinstance(f.ctx.parents.get(id(parent)), ast.Return) and node in parent.elts:
            f.element = parent.elts.index(node)  # return a, t: the caller's second name
        return "up"
    if isinstance(parent, ast.keyword):
        call = f.ctx.parents.get(id(parent))
        return argument_step(f, node, call) if isinstance(call, ast.Call) else "unknown"
    if isinstance(parent, ast.Call):
        if f.pieces and parent.args and parent.args[0] is node and _joining(parent):
            f.mixed, f.pieces = True, False  # torch.stack(pieces): t's dtype wins, uncast
            return "up"
        gen = f.ctx.parents.get(id(parent))
        if isinstance(gen, ast.comprehension) and gen.iter is parent:
            return comprehended(f, node, gen)  # for a, t in zip(h, ts)
        return argument_step(f, node, parent)
    return statement_step(f, node, parent)


_PAIRED = words("max min sort topk kthvalue mode median cummax cummin")


def _indices(node: ast.AST, parent: ast.Subscript) -> bool:
    """``torch.max(t, dim)[1]`` or ``t.sort()[1]``: the second of (values, indices)."""
    index = parent.slice
    if not (isinstance(index, ast.Constant) and index.value == 1 and isinstance(node, ast.Call)):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else ""
    dim = len(node.args) > (1 if dotted(func).startswith("torch.") else 0) or bool(node.keywords)
    return name in _PAIRED and (dim or name in ("sort", "topk", "kthvalue"))


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
    return method in REDUCTIONS or zero and method not in _RESHAPES


_RESHAPES = words(
    "view reshape unsqueeze expand expand_as repeat flatten tile broadcast_to view_as "
    "reshape_as unflatten repeat_interleave"
)


def _joins(f: _Follow, seq: ast.List | ast.Tuple) -> bool:
    """``torch.cat([t, h])``: the pieces of the list meet (in ``return t, h`` they do not)."""
    outer = f.ctx.parents.get(id(seq))
    return isinstance(outer, ast.Call) and dotted(outer.func).rsplit(".", 1)[-1] in _JOINS


def _half_pieces(f: _Follow, seq: ast.AST) -> bool:
    """A list or tuple display with a floating tensor of the model's dtype in it."""
    return isinstance(seq, (ast.List, ast.Tuple)) and any(f.floating(e) for e in seq.elts)


def _joining(call: ast.Call) -> bool:
    return dotted(call.func).rsplit(".", 1)[-1] in _JOINS


_JOINS = words("cat stack concat concatenate hstack vstack dstack column_stack")
