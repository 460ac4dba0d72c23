"""Walk one forward-path function in statement order, tracking which names hold a
floating tensor (:mod:`.values` says which expressions do), and hand every expression node
to the rule checks.

Names bound inside a block (``if``/``for``/``with``/``try``) are kept after it only when
every way through the block binds them floating, so a fix never uses a name that may be
unbound. ``if x is None: x = self.embed(ids)`` leaves ``x`` floating on both ways, and
``if x is not None:`` makes an input that defaults to None floating inside. The name bound
most recently is the fallback fix *template* (:func:`.values.template_for`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

from halfprec.leaks.lint.callers import argument_for
from halfprec.leaks.lint.classes import NO_FACTS, ClassFacts
from halfprec.leaks.lint.complexes import complex_names
from halfprec.leaks.lint.comprehensions import plain_iteration
from halfprec.leaks.lint.context import Calls, Check, Context, Inputs, dotted
from halfprec.leaks.lint.deviceupcast import device_upcasts
from halfprec.leaks.lint.fate import fate_of
from halfprec.leaks.lint.floated import floated_message
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.returned import is_method_call, returned_values
from halfprec.leaks.lint.scope import Function, Imports, Program
from halfprec.leaks.lint.selfkept import self_key
from halfprec.leaks.lint.values import INDEX_NAME, floating_params, value_of

_CHECKED = (ast.Call, ast.BinOp)
_SPLITS = frozenset({"chunk", "split", "unbind", "tensor_split"})


def _target_names(target: ast.AST) -> Iterable[str]:
    if isinstance(target, ast.Name):  # most targets: nothing under it is a name
        yield target.id
        return
    for node in walk(target):
        if isinstance(node, ast.Name):
            yield node.id


def _split_of(value: ast.AST | None) -> ast.AST | None:
    """``x`` of ``x.chunk(2)``/``x.split(...)``/``torch.chunk(x, 2)``: each piece has x's
    value."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.args:
        func = value.func
        if func.attr in _SPLITS and isinstance(func.value, ast.Name) and func.value.id == "torch":
            return value.args[0]
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in _SPLITS
    ):
        return value.func.value
    return None


def _paired(target: ast.expr, value: ast.AST | None) -> list[tuple[ast.expr, ast.expr]]:
    """``q, k, v = h, *x.chunk(2)``: each target with the value it takes (a starred split
    gives each of its targets a piece of the split tensor); empty where the shapes differ."""
    if not (isinstance(target, ast.Tuple) and isinstance(value, (ast.Tuple, ast.List))):
        return []
    names, elts = target.elts, value.elts
    if any(isinstance(n, ast.Starred) for n in names):
        return []
    out: list[tuple[ast.expr, ast.expr]] = []
    spread = len(names) - len(elts) + 1
    for elt in elts:
        if isinstance(elt, ast.Starred):
            split = _split_of(elt.value)
            if split is None or not isinstance(split, ast.expr) or spread < 0:
                return []
            out += [(names[len(out) + i], split) for i in range(spread)]
        elif len(out) < len(names):
            out.append((names[len(out)], elt))
    return out if len(out) == len(names) else []


def _bind(targets: list[ast.expr], value: ast.AST | None, ctx: Context) -> None:
    pairs = _paired(targets[0], value) if len(targets) == 1 else []
    if pairs:
        for target, part in pairs:
            _bind([target], part, ctx)
        return
    if len(targets) == 1 and _returned_tuple(targets[0], value, ctx):
        return
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        held = held_submodule(value, ctx)
        if held:
            ctx.modules[targets[0].id] = held  # decoder = self.decoders[i].to(x.device)
    whole = value_of(value, ctx) if value is not None else None
    split = _split_of(value)
    piece: bool | None = value_of(split, ctx) if split is not None else None
    if piece is None and whole is not None and isinstance(value, (ast.Call, ast.Subscript)):
        piece = False  # a, b = self.attn(h) or pairs[i]: a tuple's parts, each guessed
    for target in targets:
        if isinstance(target, ast.Subscript) and _number(value):
            continue  # h[..., :k] = 0: a number written into h keeps h's dtype
        kept = self_key(target)
        if kept is not None:  # self.w = h: read back as h in this function (see .selfkept)
            ctx.floating.pop(kept, None)
            if whole is not None:
                ctx.floating[kept] = whole
            continue
        for name in _target_names(target):
            ctx.floating.pop(name, None)
            ctx.outputs.discard(name)
            if isinstance(target, ast.Name):
                got = whole
                if got is not None and name in ctx.containers and isinstance(value, ast.Call):
                    ctx.outputs.add(name)  # out = self.layer(h); out[0]: maybe a tuple
            else:
                got = None if INDEX_NAME.search(name) else piece
            if got is not None:
                ctx.floating[name] = got


def _number(value: ast.AST | None) -> bool:
    """``0``, ``-1.0``, ``True``: a Python number written as a literal."""
    while isinstance(value, ast.UnaryOp):
        value = value.operand
    return isinstance(value, ast.Constant) and isinstance(value.value, (int, float))


def _returned_tuple(target: ast.expr, value: ast.AST | None, ctx: Context) -> bool:
    """``out, c = self.step(x, c)`` of a method returning a tuple of that length: each
    name holds its element (see :mod:`.returned`); False when that is not known."""
    if not (isinstance(target, ast.Tuple) and isinstance(value, ast.Call)):
        return False
    if any(isinstance(e, ast.Starred) for e in target.elts):
        return False
    got = returned_values(value, ctx, value_of, len(target.elts))
    if got is None and is_method_call(value, ctx):
        got = [None] * len(target.elts)  # a, b = self.route(h) of a whole value: not known
    if got is None:
        return False
    for elt, element in zip(target.elts, got, strict=True):
        kept = self_key(elt)
        if kept is not None:  # self.pi, self.mu = helper(h): each attribute its element
            ctx.floating.pop(kept, None)
            if element is not None:
                ctx.floating[kept] = element
            continue
        for name in _target_names(elt):
            ctx.floating.pop(name, None)
            ctx.outputs.discard(name)
            if element is not None and isinstance(elt, ast.Name) and not INDEX_NAME.search(name):
                ctx.floating[name] = element
    return True


def held_submodule(value: ast.AST | None, ctx: Context) -> str:
    """``self.decoders[i]``, ``self.head.to(x.device)``: a layer of the module bound to a
    local name (moved or switched to eval, which return the layer itself); its attribute."""
    while (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in _RETURNS_SELF
    ):
        value = value.func.value
    if isinstance(value, ast.Subscript) and not isinstance(value.slice, ast.Slice):
        value = value.value
    if not (isinstance(value, ast.Attribute) and dotted(value.value) == "self"):
        return ""
    return value.attr if value.attr in dict(ctx.facts.layers) else ""


_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "eval", "train", "requires_grad_"})


def _headers(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions of a compound statement that are not inside its bodies."""
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in stmt.items]
    if isinstance(stmt, ast.Try):
        return [h.type for h in stmt.handlers if h.type is not None]
    if isinstance(stmt, ast.Match):
        return [stmt.subject]
    return []


def _bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    if isinstance(stmt, ast.Try):
        return [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
    if isinstance(stmt, ast.Match):
        return [c.body for c in stmt.cases]
    out = [getattr(stmt, "body", []), getattr(stmt, "orelse", [])]
    return [b for b in out if b]


def _scan(nodes: Iterable[ast.AST], ctx: Context, checks: list[Check]) -> None:
    if not checks:
        return  # a callee walked only so that a value can be followed through it
    hot = ctx.hot_lines
    for root in nodes:
        first = getattr(root, "lineno", 0)
        last = getattr(root, "end_lineno", None) or first
        if hot is not None and not any(n in hot for n in range(first, last + 1)):
            continue
        for node in walk(root):
            if type(node) in _CHECKED:
                for check in checks:
                    check(node, ctx)


def _none_tests(test: ast.AST) -> tuple[list[str], list[str]]:
    """Names that ``test`` proves not None when true, and when false."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [n for v in test.values for n in _none_tests(v)[0]], []
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and len(test.ops) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        if isinstance(test.ops[0], ast.IsNot):
            return [test.left.id], []
        if isinstance(test.ops[0], ast.Is):
            return [], [test.left.id]
    if isinstance(test, ast.Name):  # `if x:` of an optional tensor
        return [test.id], []
    return [], []


def _with_inputs(state: dict[str, bool], names: list[str], ctx: Context) -> dict[str, bool]:
    """``state`` with the optional inputs among ``names`` now floating."""
    out = dict(state)
    for name in names:
        if name in ctx.optional and name not in out:
            out[name] = ctx.optional[name]
    return out


def _merge(paths: list[dict[str, bool]]) -> dict[str, bool]:
    """The names floating on every path, proved only where every path proves them, in the
    order of the first path."""
    first = paths[0]
    return {k: all(p[k] for p in paths) for k in first if all(k in p for p in paths)}


def _over_self(
    target: ast.expr, it: ast.expr, modules: dict[str, str]
) -> Iterator[tuple[str, str]]:
    """``for layer in self.layers``: the loop runs over a submodule list; also over
    ``self.layers[1:]``, ``reversed(...)``, ``enumerate(...)``, ``zip(self.a, self.b)`` and a
    ``ModuleDict``'s ``.values()``/``.items()``, and a list of that list (``for layer in
    stage`` in ``for stage in self.stages``). Yields (local name, attribute)."""
    if isinstance(target, ast.Name) and isinstance(it, ast.Name) and it.id in modules:
        yield target.id, modules[it.id]
        return
    while isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Slice):
        it = it.value  # self.layers[:-1]
    if isinstance(it, ast.Call) and plain_iteration(it):
        func, args = it.func, it.args
        if isinstance(func, ast.Name) and func.id == "reversed" and len(args) == 1:
            yield from _over_self(target, args[0], modules)
        elif isinstance(func, ast.Name) and func.id == "enumerate" and len(args) <= 2:
            if isinstance(target, ast.Tuple) and len(target.elts) == 2:
                yield from _over_self(target.elts[1], args[0], modules)
        elif isinstance(func, ast.Name) and func.id == "zip":
            if isinstance(target, ast.Tuple) and len(target.elts) == len(args):
                for name, arg in zip(target.elts, args, strict=True):
                    yield from _over_self(name, arg, modules)
        elif isinstance(func, ast.Attribute) and func.attr in ("values", "items") and not args:
            if func.attr == "values":
                yield from _over_self(target, func.value, modules)
            elif isinstance(target, ast.Tuple) and len(target.elts) == 2:
                yield from _over_self(target.elts[1], func.value, modules)
        return
    if (
        isinstance(target, ast.Name)
        and isinstance(it, ast.Attribute)
        and isinstance(it.value, ast.Name)
        and it.value.id == "self"
    ):
        yield target.id, it.attr


def _walk_compound(stmt: ast.stmt, ctx: Context, checks: list[Check]) -> None:
    headers = _headers(stmt)
    _scan(headers, ctx, checks)
    before = dict(ctx.floating)
    sure, unless = _none_tests(stmt.test) if isinstance(stmt, ast.If) else ([], [])
    bodies = _bodies(stmt)
    paths: list[dict[str, bool]] = []
    for i, block in enumerate(bodies):
        ctx.floating = _with_inputs(before, sure if i == 0 else unless, ctx)
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            _bind([stmt.target], None, ctx)
            for name, attr in _over_self(stmt.target, stmt.iter, ctx.modules):
                if attr not in ctx.facts.float_lists:
                    ctx.modules[name] = attr  # for layer in self.layers
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            _bind([i.optional_vars for i in stmt.items if i.optional_vars], None, ctx)
        _walk_block(block, ctx, checks)
        if i == 0:  # if not x.is_cuda: x = x.float(): half on the other devices
            for name in device_upcasts(stmt) & before.keys():
                ctx.floating.setdefault(name, False)
        if not (block and isinstance(block[-1], (ast.Raise, ast.Return))):
            paths.append(ctx.floating)  # a block that raises or returns ends its way here
    if not (isinstance(stmt, ast.If) and stmt.orelse or isinstance(stmt, _ALWAYS_RUN)):
        # the way around the block: an if without else, a loop that does not run, a try
        # that raises early; a with block always runs its body
        around = _with_inputs(before, unless, ctx)
        for name in ctx.filled - around.keys():
            if paths and all(name in p for p in paths):  # a list the block fills: left empty
                around[name] = all(p[name] for p in paths)  # around it, it holds no other
        paths.append(around)
    ctx.floating = _merge(paths) if paths else before


_ALWAYS_RUN = (ast.With, ast.AsyncWith)


def _walk_block(body: list[ast.stmt], ctx: Context, checks: list[Check]) -> None:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            outer, optional = dict(ctx.floating), dict(ctx.optional)
            inputs, maybe = floating_params(stmt, is_forward=False)
            ctx.floating.update(inputs)
            ctx.optional.update(maybe)
            _walk_block(stmt.body, ctx, checks)
            ctx.floating, ctx.optional = outer, optional
            continue
        if isinstance(stmt, ast.ClassDef):
            continue
        ctx.states[id(stmt)] = dict(ctx.floating)
        if _bodies(stmt) and (_headers(stmt) or isinstance(stmt, ast.Try)):
            _walk_compound(stmt, ctx, checks)
            continue
        _scan([stmt], ctx, checks)
        if isinstance(stmt, ast.Assign):
            _bind(stmt.targets, stmt.value, ctx)
        elif isinstance(stmt, ast.AnnAssign):
            _bind([stmt.target], stmt.value, ctx)
        elif isinstance(stmt, ast.Delete):
            for t in stmt.targets:
                _bind([t], None, ctx)
        elif isinstance(stmt, ast.Expr):
            _fill(stmt.value, ctx)


_FILLS = {"append": 0, "insert": 1, "extend": 0}


def _fill(call: ast.AST, ctx: Context) -> None:
    """``outs.append(h)`` (also ``insert``, ``extend([h])``) of a floating ``h``: the list
    holds floating tensors, so ``outs[i]`` and ``torch.stack(outs)`` are floating, also after
    the loop that fills it."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return
    owner, at = call.func.value, _FILLS.get(call.func.attr)
    if not isinstance(owner, ast.Name) or at is None or len(call.args) != at + 1:
        return
    item = call.args[at]
    if call.func.attr == "extend":
        if not (isinstance(item, (ast.List, ast.Tuple)) and item.elts):
            return
        item = item.elts[0]
    got = value_of(item, ctx)
    if got is None or INDEX_NAME.search(owner.id):
        return
    held = ctx.floating.get(owner.id)
    ctx.floating[owner.id] = got if held is None else held and got
    ctx.filled.add(owner.id)


_INDEXED = re.compile(r"(?<![\w.])([A-Za-z_]\w*+)\[\s*-?\d+\s*\]")


def _containers(fn: Function, lines: list[str]) -> frozenset[str]:
    """Names indexed by an integer constant somewhere in ``fn`` (``out[0]``): bound to a
    submodule's result, they may hold a tuple. Read from the text, like the call graph."""
    text = "\n".join(lines[fn.lineno - 1 : fn.end_lineno or fn.lineno])
    return frozenset(m.group(1) for m in _INDEXED.finditer(text))


def walk_function(
    fn: Function,
    imports: Imports,
    lines: list[str],
    checks: list[Check],
    *,
    facts: ClassFacts = NO_FACTS,
    is_forward: bool = False,
    hot_lines: frozenset[int] | None = None,
    calls: Calls | None = None,
    inputs: dict[str, bool] | None = None,
) -> Context:
    """Run ``checks`` over every expression of ``fn``; returns the context with its reports.

    ``facts``: what ``fn``'s class says about its attributes; ``is_forward``: ``fn`` is a
    module's ``forward``. Statements that touch none of ``hot_lines`` are not walked (they
    still bind names). ``inputs``: parameters known floating (the values one call passes).
    """
    ctx = Context(
        imports=imports,
        lines=lines,
        facts=facts,
        hot_lines=hot_lines,
        function=fn,
        is_forward=is_forward,
        calls=calls,
    )
    ctx.floating, ctx.optional = floating_params(fn, is_forward)
    ctx.floating.update(_from_callers(fn, ctx) if inputs is None else inputs)
    ctx.complex = (
        complex_names(fn, lines) if calls is None else calls.per_function(fn, complex_names)
    )
    for name in ctx.complex:  # x.conj(): a spectrum, never half
        ctx.floating.pop(name, None)
        ctx.optional.pop(name, None)
    ctx.containers = (
        _containers(fn, lines) if calls is None else calls.per_function(fn, _containers)
    )
    _scan([*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)], ctx, checks)
    _walk_block(fn.body, ctx, checks)
    _settle(ctx)
    return ctx


def _from_callers(fn: Function, ctx: Context) -> dict[str, bool]:
    """The inputs of a helper (not a ``forward``) that a call of it in the file passes a
    floating tensor: ``self.q_sample(x_start=images, ...)`` from a forward whose ``images``
    is proved floating makes ``x_start`` floating, proved when every call passes a proved
    floating tensor (else guessed, as from a name)."""
    calls = ctx.calls
    if calls is None or ctx.is_forward or id(fn) in calls.busy:
        return {}
    a = fn.args
    params = [
        p
        for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)
        if p.arg not in ("self", "cls") and p.arg not in ctx.floating
    ]
    if not params:
        return {}
    sites = calls.callers(fn)
    if not sites:
        return {}
    calls.busy.add(id(fn))
    try:
        callers = [calls.context(s.caller, s.facts, s.is_forward) for s in sites]
    finally:
        calls.busy.discard(id(fn))
    method = calls.program.functions.get(fn.name) is not fn
    out: dict[str, bool] = {}
    for param in params:
        values = []
        for site, caller in zip(sites, callers, strict=True):
            arg = argument_for(fn, site.call, param, method)
            values.append(None if arg is None else value_of(arg, caller.at(site.call)))
        known = [v for v in values if v is not None]
        if known:  # proved only when every call passes a proved floating tensor
            out[param.arg] = len(known) == len(values) and all(known)
    return out


def _settle(ctx: Context) -> None:
    """Keep the pending findings whose fp32 tensor leaks (:mod:`.fate`); drop the fix of
    one whose tensor is also an index, sort key, counter or ``grid_sample`` grid: in half
    it would hold other integers or crash. Then run the checks deferred until the whole
    function was walked."""
    for node, code, message, fix, made in ctx.pending:
        fate = fate_of(made, ctx, upcast=code.startswith("HP2"))
        if not fate.reported:
            continue
        if fate.integer or fate.grid:
            fix = None
        if fate.zero_output:
            message = zero_output_message(message)
        elif fate.floated:
            message = floated_message(message)
        ctx.found.append((node, code, message, fix))
    ctx.pending.clear()
    for deferred in ctx.deferred:
        deferred()
    ctx.deferred.clear()


def zero_output_message(message: str) -> str:
    """A factory's message said of a 0-dim tensor that reaches the output: it promotes no
    half tensor with dimensions, but the output (a loss) is fp32 in a half model."""
    call, _, hint = message.partition(" without dtype makes fp32 in a half model; ")
    return f"{call} makes a 0-dim fp32 value that reaches the module's output; {hint}"


def calls_of(program: Program, imports: Imports, lines: list[str]) -> Calls:
    """The :class:`~.context.Calls` of one file: each callee is walked once, with no checks,
    so that :mod:`.fate` can follow a tensor through its parameter."""

    def walk(
        fn: Function, facts: ClassFacts, is_forward: bool, calls: Calls, inputs: Inputs = None
    ) -> Context:
        return walk_function(
            fn, imports, lines, [], facts=facts, is_forward=is_forward, calls=calls, inputs=inputs
        )

    return Calls(program, walk, lines)
