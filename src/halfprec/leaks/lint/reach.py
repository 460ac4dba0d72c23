"""Where a followed tensor goes beyond its function (see :mod:`.fate`): into a call of the
same file (a function, a method, a constructor, a submodule's ``forward``), back out of a
``return`` into each caller, and from an attribute it is kept in into every read of it.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from halfprec.leaks.lint.callers import CallSite, argument_for
from halfprec.leaks.lint.chosen import choices
from halfprec.leaks.lint.classes import NO_FACTS, ClassFacts
from halfprec.leaks.lint.context import Calls, Context, dotted
from halfprec.leaks.lint.family import related_reads
from halfprec.leaks.lint.keyed import held_key
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.recast import cast_before
from halfprec.leaks.lint.scope import Function


@dataclass
class Fate:
    """Where one fp32 tensor ends up. ``leaks``: it meets half or reaches the output;
    ``integer``: it is used as an index, sort key or counter (a fix to half would change
    the integers it holds); ``grid``: a ``grid_sample`` grid; ``unknown``: it goes where
    the lint cannot follow; ``zero_output``: the leak is a 0-dim tensor made fp32
    (``torch.tensor(0.)``) reaching the module's output, a loss accumulator's start."""

    leaks: bool = False
    integer: bool = False
    grid: bool = False
    unknown: bool = False
    zero_output: bool = False
    floated: bool = False  # data of any dtype made floating on the way (see .floated)

    @property
    def reported(self) -> bool:
        """Whether this is a finding: a leak seen. A tensor that only goes where the lint
        cannot follow (a function of another file, an attribute) is not reported: a lint
        that guesses there cries wolf (transformers hands its default masks to mask
        builders that cast them)."""
        return self.leaks


class Follow(Protocol):
    """One walk forward from a created tensor (:class:`.fate._Follow`): what a walk into
    another function takes over from it."""

    ctx: Context
    upcast: bool
    caller: tuple[Follow, ast.Call] | None
    depth: int
    element: int | None
    scalar: bool
    one_dim: bool
    zero: bool
    batched: bool
    opaque: bool
    ranked: bool
    thunk: bool
    chosen: bool
    mixed: bool
    empty: bool
    strict: bool
    key: str | None
    names: set[str]
    attrs: set[str]
    guards: list[ast.arg]
    fate: Fate
    seen: set[tuple[str, int]]
    hops: int

    def spawn(self, ctx: Context) -> Follow: ...

    def floating(self, node: ast.AST) -> bool: ...

    def half_scalar(self, node: ast.AST) -> bool: ...

    def meets(self, others: Sequence[ast.AST], join: bool = False, total: bool = False) -> str: ...

    def climb(self, node: ast.AST) -> None: ...

    def follow_name(self, name: str, bound_at: ast.AST) -> None: ...

    def derived(self, node: ast.AST) -> bool: ...

    def reads_followed(self, n: ast.AST) -> bool: ...


_MAX_DEPTH = 6  # calls followed into, one inside another
# a callee: its function, its class's facts, whether it is a forward, whether its first
# parameter is self, and the calls of the file that defines it when that is another file
Callee = tuple[Function, ClassFacts, bool, bool, Calls | None]


def _callees(f: Follow, call: ast.Call) -> list[Callee]:
    """The functions ``call`` may run: the one it names (:func:`_callee`), else each method
    a name or attribute chosen at run time may hold (:mod:`.chosen`)."""
    one = _callee(f, call.func)
    if one is not None:
        return [one]
    calls, function = f.ctx.calls, f.ctx.function
    if calls is None or f.depth >= _MAX_DEPTH:
        return []
    cls = None
    if not isinstance(call.func, ast.Name) and isinstance(function, Function):
        owner = calls.program.owner_of(function)  # self.loss(...): the class's bindings
        cls = calls.program.classes.get(owner) if owner else None
    found = (_callee(f, alt) for alt in choices(call.func, f.ctx, cls))
    return [c for c in found if c is not None]


def _callee(f: Follow, func: ast.expr) -> Callee | None:
    """The function a call of ``func`` runs, when this file defines it: a function, a
    method of this class, or the ``forward`` of a submodule whose class is defined here.
    With its class's facts, whether it is a ``forward``, and whether its first parameter is
    ``self``."""
    calls = f.ctx.calls
    if calls is None or f.depth >= _MAX_DEPTH:
        return None
    program = calls.program
    if isinstance(func, ast.Name) and f.ctx.function is not None:
        inner = calls.nested_in(f.ctx.function, func.id)
        if inner is not None:  # def ease(t): ... inside the walked function
            return inner, NO_FACTS, False, False, None
    if isinstance(func, ast.Name) and func.id in program.functions:
        return program.functions[func.id], NO_FACTS, False, False, None
    there = calls.function(func.id) if isinstance(func, ast.Name) and calls.function else None
    if there is not None:  # from .utils import pad_to: that file's function
        return there[1], NO_FACTS, False, False, there[0]
    made = program.methods_of(func.id) if isinstance(func, ast.Name) else None
    if made is not None and "__init__" in made[0]:  # Beams(tokens, scores): its constructor
        return made[0]["__init__"], made[1], False, True, None
    held = _held(f, func) or _inherited(f, func) or _on_name(calls, func)
    held = held or _object_method(f, func) or _keyed(f, func)
    if held is not None:
        return held
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    if func.value.id != "self":
        return None
    function = f.ctx.function
    owner = program.owner_of(function) if isinstance(function, Function) else None
    info = program.methods_of(owner) if owner else None
    if info is not None and func.attr in info[0]:
        method = info[0][func.attr]  # self.helper(t) of a staticmethod: t is its first
        return method, info[1], False, not _static(method), None
    held_fn = dict(f.ctx.facts.callables).get(func.attr, "")
    layer = func.attr in dict(f.ctx.facts.layers)  # or a module on another branch
    if held_fn in program.functions and not layer:  # self.f = cosine_schedule: that function
        return program.functions[held_fn], NO_FACTS, False, False, None
    cls = dict(f.ctx.facts.module_classes).get(func.attr)
    sub = program.methods_of(cls) if cls else None
    if sub is not None and "forward" in sub[0]:
        return sub[0]["forward"], sub[1], True, True, None
    if cls is None and not layer and not held_fn:  # self.step(t) of a base of another file
        return _based_elsewhere(calls, owner, func.attr)
    return _elsewhere(calls, cls)


def _elsewhere(calls: Calls, cls: str | None) -> Callee | None:
    """The ``forward`` of ``cls`` where another file of the tree defines it."""
    found = calls.other(cls) if cls and calls.other is not None else None
    if found is None:
        return None
    there, forward, facts = found
    return forward, facts, True, True, there


def _inherited(f: Follow, func: ast.AST) -> Callee | None:
    """``super().forward(...)`` (or another method) where a base class of this class is
    defined in this file: that base's method."""
    calls, function = f.ctx.calls, f.ctx.function
    assert calls is not None  # _callee checked
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call)):
        return None
    if not (isinstance(func.value.func, ast.Name) and func.value.func.id == "super"):
        return None
    program = calls.program
    owner = program.owner_of(function) if isinstance(function, Function) else None
    cls = program.classes.get(owner) if owner else None
    for base in cls.bases if cls is not None else []:
        info = program.methods_of(base.id) if isinstance(base, ast.Name) else None
        if info is not None and func.attr in info[0]:
            return info[0][func.attr], info[1], func.attr == "forward", True, None
    return _based_elsewhere(calls, owner, func.attr)


def _on_name(calls: Calls, func: ast.AST) -> Callee | None:
    """``Tree.build(p, areas=t)``: a class's method called on the class, of this file or
    imported from another; ``ops.mix(h, t)``: a function of a module of the tree."""
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    name, attr = func.value.id, func.attr
    if name == "self":
        return None
    made = calls.program.methods_of(name)
    if made is not None:
        fn = made[0].get(attr)
        return (fn, made[1], attr == "forward", _bound(fn), None) if fn is not None else None
    found = calls.method(name, attr) if calls.method is not None else None
    if found is not None:
        there, fn, facts = found
        return fn, facts, attr == "forward", _bound(fn), there
    module = calls.module(name, attr) if calls.module is not None else None
    return (module[1], NO_FACTS, False, False, module[0]) if module is not None else None


def _bound(fn: Function) -> bool:
    """Whether a method called on its class gets its first parameter bound (``cls`` of a
    classmethod); a staticmethod or a plain method (``Base.forward(self, x)``) does not."""
    return any(isinstance(d, ast.Name) and d.id == "classmethod" for d in fn.decorator_list)


def _based_elsewhere(calls: Calls, owner: str | None, name: str) -> Callee | None:
    """The method ``name`` that class ``owner`` of this file inherits from a base class
    another file of the tree defines (``class Policy(BasePolicy)``)."""
    cls = calls.program.classes.get(owner) if owner else None
    if cls is None or calls.method is None:
        return None
    for base in cls.bases:
        found = calls.method(base.id, name) if isinstance(base, ast.Name) else None
        if found is not None:
            there, fn, facts = found
            return fn, facts, name == "forward", True, there
    return None


def _object_method(f: Follow, func: ast.AST) -> Callee | None:
    """``self.model.encode(...)`` where ``self.model = Policy(...)`` and this file defines
    the class, or another file of the tree: that class's method (a static method takes no
    ``self``)."""
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute)):
        return None
    holder = func.value
    if dotted(holder.value) != "self":
        return None
    cls = dict(f.ctx.facts.module_classes).get(holder.attr)
    calls = f.ctx.calls
    assert calls is not None  # _callee checked
    info = calls.program.methods_of(cls) if cls else None
    method = info[0].get(func.attr) if info is not None else None
    if info is None and cls and calls.method is not None:  # a class of another file
        found = calls.method(cls, func.attr)
        if found is not None:
            there, fn, facts = found
            return fn, facts, func.attr == "forward", not _static(fn), there
    if info is None or method is None:
        return None
    return method, info[1], func.attr == "forward", not _static(method), None


def _keyed(f: Follow, func: ast.AST) -> Callee | None:
    """``self.model.predictor(...)`` of a dict of modules the model was handed: the
    ``forward`` of the class the package stores under that key (see :mod:`.keyed`)."""
    calls = f.ctx.calls
    key = held_key(func, f.ctx)
    found = calls.keyed(key) if key and calls is not None and calls.keyed else None
    if found is None:
        return None
    there, forward, facts = found
    return forward, facts, True, True, there


def _static(fn: Function) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


def _held(f: Follow, func: ast.AST) -> Callee | None:
    """``self.blocks[i](...)`` or ``block(...)`` in ``for block in self.blocks``, where
    ``self.blocks`` holds modules of one class of this file: that class's ``forward``."""
    calls = f.ctx.calls
    assert calls is not None  # _callee checked
    attr = ""
    if isinstance(func, ast.Name):
        attr = f.ctx.modules.get(func.id, "")
    elif isinstance(func, ast.Subscript) and isinstance(func.value, ast.Attribute):
        holder = func.value
        if isinstance(holder.value, ast.Name) and holder.value.id == "self":
            attr = holder.attr
    cls = dict(f.ctx.facts.module_classes).get(attr) if attr else None
    sub = calls.program.methods_of(cls) if cls else None
    if sub is not None and "forward" in sub[0]:
        return sub[0]["forward"], sub[1], True, True, None
    return _elsewhere(calls, cls)


def _parameter(
    fn: Function, call: ast.Call, node: ast.AST, skip_self: bool, key: str | None
) -> ast.arg | None:
    """The parameter of ``fn`` that receives ``node`` in ``call``: past the positional
    parameters, ``*rows`` (which holds it among its elements); a keyword no parameter
    names, ``**parts`` where ``fn`` reads it by that key; None where a ``*pieces`` of the
    call comes first. ``key``: the key a dict passed as ``**node`` holds the tensor
    under."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args][1 if skip_self else 0 :]
    for i, arg in enumerate(call.args):
        if arg is node:
            return positional[i] if i < len(positional) else a.vararg
        if isinstance(arg, ast.Starred):
            return None
    for k in call.keywords:
        if k.value is node:
            wanted = k.arg if k.arg is not None else key  # f(**kwargs): the key it is under
            named = next((p for p in (*positional, *a.kwonlyargs) if p.arg == wanted), None)
            if named is None and wanted is not None and _picks(fn, a.kwarg, wanted):
                return a.kwarg  # def f(**parts): ... parts["w"]
            return named
    return None


def _picks(fn: Function, parts: ast.arg | None, key: str) -> bool:
    """Whether ``fn`` reads ``key`` out of its ``**parts`` (``parts["w"]``,
    ``parts.get("w")``); ``**parts`` only handed on is not followed."""
    if parts is None:
        return False
    for node in walk(fn):
        if isinstance(node, ast.Subscript):
            holder, index = node.value, node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            holder, index = node.func.value, node.args[0]
        else:
            continue
        named = isinstance(holder, ast.Name) and holder.id == parts.arg
        if named and isinstance(index, ast.Constant) and index.value == key:
            return True
    return False


def enter(f: Follow, node: ast.AST, call: ast.Call) -> str | None:
    """Follow ``node`` into the function ``call`` runs, where this file defines it; None
    when it does not."""
    targets = _callees(f, call)
    if not targets:
        return None
    entered = False
    for target in targets:
        if f.fate.leaks:
            break
        entered = _enter_one(f, node, call, target) or entered
    return "done" if entered else "unknown"


def _enter_one(f: Follow, node: ast.AST, call: ast.Call, target: Callee) -> bool:
    """Follow ``node`` into one callee of ``call``; False when no parameter receives it."""
    fn, facts, is_forward, skip_self, there = target
    param = _parameter(fn, call, node, skip_self, f.key)
    if param is None:
        return False
    calls = there or f.ctx.calls
    assert calls is not None  # _callee found one
    inner = f.spawn(calls.context(fn, facts, is_forward))
    inner.fate, inner.seen, inner.hops, inner.opaque = f.fate, f.seen, f.hops, f.opaque
    if there is not None:  # another file's helper: a budget of names of its own
        inner.hops = 0
    inner.thunk, f.thunk = f.thunk, False
    inner.chosen, inner.scalar = f.chosen, f.scalar
    unpacked = any(k.arg is None and k.value is node for k in call.keywords)
    inner.key = None if unpacked else f.key  # f(**kwargs) hands on the value, f(d) the dict
    if param is fn.args.kwarg:  # f(w=t) or f(**kwargs) into def f(**parts): parts["w"] is t
        inner.key = next((k.arg for k in call.keywords if k.value is node), None) or f.key
    inner.caller, inner.depth = (f, call), f.depth + 1
    inner.follow_name(param.arg, param)
    f.hops = inner.hops if there is None else f.hops + 1
    return True


def to_callers(f: Follow) -> bool:
    """Follow a returned value on at each call of its function in this file: a helper's
    result in its callers, a ``forward``'s in the modules that hold its class. False when
    the file has no such call (or the calls are too deep to follow)."""
    calls, fn = f.ctx.calls, f.ctx.function
    if calls is None or f.depth >= _MAX_DEPTH:
        return False
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    # its calls in this file, and those another file's forward path makes (.elsewhere)
    sites: list[tuple[ast.Call, CallSite | Context]] = [(s.call, s) for s in calls.callers(fn)]
    sites.extend(calls.outside.get(id(fn), ()))
    method = bool(f.guards) and calls.program.owner_of(fn) is not None
    for call, where in sites:
        # return a, t: each its own way; a 0-dim s.max() and s itself too
        key = (f"<call>{f.element}{f.ranked}{f.scalar}", id(call))
        if key in f.seen or f.fate.leaks:
            continue
        if any(argument_for(fn, call, g, method) is None for g in f.guards):
            continue  # made only under a flag this call leaves off
        f.seen.add(key)
        if isinstance(where, CallSite):
            where = calls.context(where.caller, where.facts, where.is_forward)
        outer = f.spawn(where)
        outer.fate, outer.seen, outer.hops, outer.depth = f.fate, f.seen, f.hops, f.depth + 1
        outer.element, outer.scalar, outer.opaque = f.element, f.scalar, f.opaque
        outer.key, outer.chosen = f.key, f.chosen
        outer.climb(call)
        f.hops = outer.hops
    return bool(sites)


def to_readers(f: Follow, target: ast.Attribute) -> bool:
    """``self.mask = t``: kept between calls, so follow ``t`` on at every read of
    ``self.mask`` in the methods of this class; ``beams.scores = t`` (or ``self.scores = t``
    in the constructor of such an object): at every read of ``<name>.scores`` in the file.
    False when the lint sees no read (a function of no class, calls too deep)."""
    calls, fn = f.ctx.calls, f.ctx.function
    if calls is None or f.depth >= _MAX_DEPTH or not isinstance(target.value, ast.Name):
        return False
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    owner = calls.program.owner_of(fn) if target.value.id == "self" else ""
    if owner is None:
        return False
    key = (f"self.{owner}.{target.attr}", 0)
    if key in f.seen:
        return True  # self.mask = self.mask[perm]: its reads are being followed
    f.seen.add(key)
    reads = [*calls.reads(fn, target.attr), *related_reads(calls, fn, target.attr)] if owner else []
    held = calls.held(target.attr)
    for ctx, node in [*reads, *held]:
        if f.fate.leaks:
            break
        if owner and cast_before(ctx, node):
            continue  # self.table = self.table.to(x.dtype) earlier in that method
        reader = f.spawn(ctx)
        reader.fate, reader.seen, reader.hops, reader.depth = f.fate, f.seen, f.hops, f.depth + 1
        reader.scalar, reader.opaque, reader.chosen = f.scalar, f.opaque, f.chosen
        reader.attrs = {target.attr} if owner else set()
        reader.climb(node)
        f.hops = reader.hops
    return bool(reads or held)


def to_holders(f: Follow, name: str) -> None:
    """``cache["buf"] = t`` of a parameter ``cache``: the name each caller passes holds
    ``t`` under the same key from that call on."""
    calls, fn = f.ctx.calls, f.ctx.function
    if calls is None or f.depth >= _MAX_DEPTH:
        return
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    a = fn.args
    param = next((p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg == name), None)
    if param is None:
        return
    method = bool(a.args) and a.args[0].arg == "self"
    for site in calls.callers(fn):
        arg = argument_for(fn, site.call, param, method)
        key = (f"<holder>{name}", id(site.call))
        if not isinstance(arg, ast.Name) or key in f.seen or f.fate.leaks:
            continue
        f.seen.add(key)
        outer = f.spawn(calls.context(site.caller, site.facts, site.is_forward))
        outer.fate, outer.seen, outer.hops, outer.depth = f.fate, f.seen, f.hops, f.depth + 1
        outer.key, outer.chosen = f.key, f.chosen
        outer.follow_name(arg.id, outer.ctx.statement_of(site.call))
        f.hops = outer.hops
