"""What the rule checks see while one forward-path function is walked: the file's imports,
its class's facts, which names hold a floating tensor (and whether that is proved or
guessed), and where to report."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

from halfprec.leaks.lint.anchors import not_tensors
from halfprec.leaks.lint.branches import rebinding_end
from halfprec.leaks.lint.callers import CallIndex, CallSite, call_sites, returns_of
from halfprec.leaks.lint.classes import NO_FACTS, ClassFacts
from halfprec.leaks.lint.nodes import parent_map, walk
from halfprec.leaks.lint.nodes import words as words  # the rules' name tables import it here
from halfprec.leaks.lint.reaching import reaching_values
from halfprec.leaks.lint.scope import Function, Imports, Program

Inputs = dict[str, bool] | None  # parameters known floating where a function is walked
_T = TypeVar("_T")


def dotted(node: ast.AST) -> str:
    """``torch.nn.functional.pad`` for an attribute chain of names; ``""`` otherwise."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


@dataclass(frozen=True)
class Template:
    """The tensor a fix inherits dtype and device from: its source text, and whether its
    dtype is *proved* to be the model's floating dtype (then the fix is safe)."""

    text: str
    known: bool


def names_of(fn: ast.AST) -> dict[str, list[ast.Name]]:
    """Every ``Name`` node of ``fn`` by name, in source order."""
    out: dict[str, list[ast.Name]] = {}
    for node in walk(fn):
        if isinstance(node, ast.Name):
            out.setdefault(node.id, []).append(node)
    for nodes in out.values():
        nodes.sort(key=lambda n: (n.lineno, n.col_offset))
    return out


@dataclass
class Context:
    """What the checks see: imports, the floating names bound here, and where to report.

    ``floating`` maps each name that holds a floating tensor to whether that is proved
    (True) or guessed from a name or a ``torch.Tensor`` annotation (False), in binding
    order. ``optional`` holds inputs that default to None: floating once tested not None.
    ``modules`` maps local names bound to submodules (``for layer in self.layers``) to the
    attribute they come from, and
    ``outputs`` names bound to a submodule's whole result, which may be a tuple.
    """

    imports: Imports
    lines: list[str]
    facts: ClassFacts = NO_FACTS
    floating: dict[str, bool] = field(default_factory=dict)
    optional: dict[str, bool] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    outputs: set[str] = field(default_factory=set)
    containers: frozenset[str] = frozenset()
    found: list[tuple[ast.AST, str, str, object]] = field(default_factory=list)
    hot_lines: frozenset[int] | None = None  # lines a rule could fire on; None: all
    function: ast.AST | None = None
    is_forward: bool = False  # the function is a module's forward: its return is the output
    states: dict[int, dict[str, bool]] = field(default_factory=dict)  # id(stmt) -> floating
    pending: list[tuple[ast.AST, str, str, object, ast.AST]] = field(default_factory=list)
    deferred: list[Callable[[], None]] = field(default_factory=list)  # run once walked
    complex: frozenset[str] = frozenset()  # names read as complex tensors (x.conj())
    filled: set[str] = field(default_factory=set)  # lists filled with floating tensors
    unsure: set[int] = field(default_factory=set)  # torch.tensor(data) of data of any dtype
    _parents: dict[int, ast.AST] | None = None
    _names: dict[str, list[ast.Name]] | None = None
    _stmts: dict[int, tuple[ast.AST, ast.AST]] | None = None  # id(node) -> (node, statement)
    _at: dict[int, Context] = field(default_factory=dict)
    _anchors: dict[str, frozenset[str]] = field(default_factory=dict)  # shared by at()'s
    calls: Calls | None = None  # how to follow a tensor into a call of the same file

    @property
    def methods(self) -> frozenset[str]:
        return self.facts.methods

    @property
    def not_tensors(self) -> frozenset[str]:
        """The names never a fix's anchor (:mod:`.anchors`), found on first use: only a
        finding's fix asks, and most walked functions have none."""
        if "names" not in self._anchors:
            fn = self.function
            self._anchors["names"] = frozenset() if fn is None else not_tensors(fn)
        return self._anchors["names"]

    @property
    def template(self) -> str | None:
        """The floating-tensor name bound most recently, which fixes inherit from; never a
        name some use shows is a dict, list, object or module (:mod:`.anchors`), nor ``_``
        (a value thrown away, rebound at will)."""
        anchors = (
            name
            for name in reversed(self.floating)
            if name not in self.not_tensors and name != "_" and "." not in name
        )
        return next(anchors, None)

    @property
    def template_known(self) -> bool:
        """Whether the template's dtype is proved floating (see :class:`Template`): only
        then do fixes that inherit its dtype keep fp32 results unchanged."""
        template = self.template
        return template is not None and self.floating[template] and template not in self.outputs

    @property
    def torch_name(self) -> str | None:
        if "torch" in self.imports.torch:
            return "torch"
        return next(iter(sorted(self.imports.torch)), None)

    def is_torch_attr(self, node: ast.AST, *names: str) -> str | None:
        """The attribute name when ``node`` is ``torch.<name>`` for one of ``names``."""
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in self.imports.torch
            and node.attr in names
        ):
            return node.attr
        return None

    def char_col(self, line: int, byte_col: int) -> int:
        """ast columns count UTF-8 bytes; fixes and reports count characters."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def report(
        self,
        node: ast.AST,
        code: str,
        message: str,
        fix: object = None,
        made: ast.AST | None = None,
    ) -> None:
        """Report at ``node``; with ``made``, only if the fp32 tensor made there leaks
        (decided by :mod:`.fate` once the whole function is walked)."""
        if made is None:
            self.found.append((node, code, message, fix))
        else:
            self.pending.append((node, code, message, fix, made))

    @property
    def parents(self) -> dict[int, ast.AST]:
        """``id(node) -> parent`` over the walked function, built on first use."""
        if self._parents is None:
            fn, calls = self.function, self.calls
            if fn is None:
                self._parents = {}
            else:  # a function walked again (a callee, a caller) reuses its map
                self._parents = parent_map(fn) if calls is None else calls.parents_of(fn)
        return self._parents

    def statement_of(self, node: ast.AST) -> ast.AST:
        """The statement that holds ``node`` (found once per node of the function)."""
        if self._stmts is None:
            fn, calls = self.function, self.calls
            self._stmts = {} if fn is None or calls is None else calls.statements_of(fn)
        held = self._stmts.get(id(node))
        if held is not None and held[0] is node:
            return held[1]
        parents, start = self.parents, node
        while not isinstance(node, ast.stmt) and id(node) in parents:
            node = parents[id(node)]
        self._stmts[id(start)] = (start, node)  # the node kept: its id is never another's
        return node

    def at(self, node: ast.AST) -> Context:
        """This context with the floating names as they were at ``node``'s statement."""
        stmt = id(self.statement_of(node))
        if stmt not in self.states:
            return self
        if stmt not in self._at:
            at = object.__new__(Context)  # dataclasses.replace without __init__: the same
            at.__dict__.update(self.__dict__)  # fields, shared, and two of them new
            at.floating, at._at = self.states[stmt], {}
            self._at[stmt] = at
        return self._at[stmt]

    def is_upcast(self, node: ast.AST, depth: int = 0, every_path: bool = False) -> bool:
        """``g.float()``, ``g.to(torch.float32)``, ``torch.arange(n, dtype=torch.float)``,
        or a name last bound to one; further back, a value computed from an explicit fp32
        dtype (``emb = torch.sin(emb)`` of ``torch.arange(n, dtype=torch.float)``): fp32 on
        purpose, in a half model too. ``every_path``: a name is one only if every value
        that may reach its read is one (see :mod:`.reaching`), not only the last written."""
        if isinstance(node, ast.Name):
            if depth >= 4:
                return False
            if every_path:
                values = reaching_values(self, node)
                return bool(values) and all(self.is_upcast(v, depth + 1, True) for v in values)
            bound = self.binding_before(node)
            return bound is not None and self.is_upcast(bound, depth + 1)
        for sub in walk(node):
            deeper = isinstance(sub, ast.Name) and sub is not node and 0 < depth < 4
            if deeper and self.is_upcast(sub, depth, every_path):
                return True
            if not isinstance(sub, ast.Call) or not isinstance(sub.func, ast.Attribute):
                continue
            if sub.func.attr in ("float", "double") and not sub.args and depth <= 1:
                return True  # further back it may be a factory's own (arange(n).float())
            for arg in (*sub.args, *(k.value for k in sub.keywords)):
                text = dotted(arg)
                if text.split(".")[0] in self.imports.torch and text.endswith(
                    (".float32", ".float", ".float64", ".double")
                ):
                    return True
        return False

    def binding_before(self, use: ast.Name) -> ast.AST | None:
        """The value last assigned to ``use``'s name before ``use`` (by position)."""
        where = (use.lineno, use.col_offset)
        value: ast.AST | None = None
        here = self.statement_of(use)  # h = h * 2 reads the h bound before this statement
        for node in self._index().get(use.id, ()):
            if (node.lineno, node.col_offset) >= where:
                break
            owner = self.statement_of(node)
            if owner is here:
                continue
            if isinstance(node.ctx, ast.Store) and isinstance(owner, (ast.Assign, ast.AnnAssign)):
                value = owner.value if owner.value is not None else value
        return value

    def names(self, name: str) -> list[ast.Name]:
        """The ``Name`` nodes of ``name`` in the walked function, in source order."""
        return self._index().get(name, [])

    def _index(self) -> dict[str, list[ast.Name]]:
        """Every ``Name`` node of the walked function by name, in source order."""
        if self._names is None:
            fn, calls = self.function, self.calls
            if fn is None:
                self._names = {}
            else:
                self._names = names_of(fn) if calls is None else calls.names_of(fn)
        return self._names

    def _other_branches(self, stmt: ast.AST) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """The spans of the branches that never run in the same pass as ``stmt``: the
        other branch of each ``if`` that holds it."""
        spans: list[tuple[tuple[int, int], tuple[int, int]]] = []
        parents, node = self.parents, stmt
        while id(node) in parents:
            parent = parents[id(node)]
            if isinstance(parent, ast.If) and parent.orelse:
                inside = any(s is node for s in parent.body)
                other = parent.orelse if inside else parent.body
                if inside or any(s is node for s in parent.orelse):
                    first, last = other[0], other[-1]
                    end = (last.end_lineno or last.lineno, last.end_col_offset or 0)
                    spans.append(((first.lineno, first.col_offset), end))
            node = parent
        return spans

    def uses_after(self, name: str, stmt: ast.AST) -> list[ast.Name]:
        """The uses of ``name`` after the statement ``stmt``, up to and including the
        statement that binds it again (``h = h * 2`` still reads the old ``h``)."""
        start = (getattr(stmt, "end_lineno", 0) or 0, getattr(stmt, "end_col_offset", 0) or 0)
        stop: tuple[int, int] | None = None
        out: list[ast.Name] = []
        apart = self._other_branches(stmt)
        for use in self._index().get(name, ()):
            where = (use.lineno, use.col_offset)
            if where <= start or (stop is not None and where > stop):
                continue
            if any(a <= where <= b for a, b in apart):
                continue  # if ...: h = t / else: h = hc: the else neither reads nor rebinds t
            owner = self.statement_of(use)
            if isinstance(use.ctx, ast.Load) or isinstance(owner, ast.AugAssign):
                out.append(use)
            elif stop is None:
                end = rebinding_end(self.parents, owner, stmt, name)
                if isinstance(end[0], tuple):
                    apart.append(end)  # if c: a = x: a holds x to the end of that block
                else:
                    stop = end
        return out

    def loop_uses(self, name: str, stmt: ast.AST) -> list[ast.Name]:
        """``for ...: d = 1 - h; h = t``: in a loop, the uses of ``name`` before ``stmt``
        in the body read what ``stmt`` left on the next pass, up to the body's first
        binding of ``name``."""
        node, parents = stmt, self.parents
        while id(node) in parents and not isinstance(node, (ast.For, ast.While)):
            node = parents[id(node)]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return []
        if not isinstance(node, (ast.For, ast.While)) or not node.body:
            return []
        first = (node.body[0].lineno, node.body[0].col_offset)
        here = (getattr(stmt, "lineno", 0), getattr(stmt, "col_offset", 0))
        out: list[ast.Name] = []
        for use in self._index().get(name, ()):
            where = (use.lineno, use.col_offset)
            if not first <= where < here:
                continue
            if isinstance(use.ctx, ast.Load) or isinstance(self.statement_of(use), ast.AugAssign):
                out.append(use)
            else:
                break  # h = ... earlier in the body: the value no longer read below
        return out


Check = Callable[[ast.AST, Context], None]
_INDENTED_DEF = re.compile(r"\s+(?:async\s+)?def\s+(\w+)")


@dataclass
class Calls:
    """Following a tensor into a function, method or submodule of the same file: the file's
    :class:`~.scope.Program`, and the walked context of each callee (walked once)."""

    program: Program
    walk: Callable[[Function, ClassFacts, bool, Calls, Inputs], Context]
    lines: list[str] = field(default_factory=list)
    cache: dict[int, Context] = field(default_factory=dict)
    given_cache: dict[tuple[int, tuple[tuple[str, bool], ...]], Context] = field(
        default_factory=dict
    )
    sites: dict[int, list[CallSite]] = field(default_factory=dict)
    busy: set[int] = field(default_factory=set)  # functions whose callers are being read
    keeping: set[int] = field(default_factory=set)  # methods walked for self's state
    index: CallIndex | None = None
    returned: dict[int, list[ast.expr]] = field(default_factory=dict)
    parent_maps: dict[int, dict[int, ast.AST]] = field(default_factory=dict)
    stmt_maps: dict[int, dict[int, tuple[ast.AST, ast.AST]]] = field(default_factory=dict)
    name_maps: dict[int, dict[str, list[ast.Name]]] = field(default_factory=dict)
    transform_attrs: dict[int, frozenset[str]] = field(default_factory=dict)  # see .transforms
    torch_fn_attrs: dict[int, frozenset[str]] = field(default_factory=dict)  # see .torchfns
    nested: dict[int, dict[str, Function]] = field(default_factory=dict)  # defs inside one
    # calls of a helper of this file made in another file's forward path (see .elsewhere)
    outside: dict[int, list[tuple[ast.Call, Context]]] = field(default_factory=dict)
    indented_defs: frozenset[str] | None = None  # names of every indented def of the file
    read_once: dict[tuple[int, int], object] = field(default_factory=dict)  # per_function
    # the forward of a class another file of the tree defines (see :mod:`.imported`)
    other: Callable[[str], tuple[Calls, Function, ClassFacts] | None] | None = None
    # the layer a name imported from another file of the tree stands for (an alias there)
    alias: Callable[[str], str] | None = None
    # a function another file of the tree defines, with the walked calls of that file
    function: Callable[[str], tuple[Calls, Function] | None] | None = None
    # a method of a class another file of the tree defines (a base class of one here)
    method: Callable[[str, str], tuple[Calls, Function, ClassFacts] | None] | None = None
    # a function of a module another file of the tree is (from . import ops: ops.mix)
    module: Callable[[str, str], tuple[Calls, Function] | None] | None = None
    # the forward of the module class the package stores under a key of a dict of modules
    keyed: Callable[[str], tuple[Calls, Function, ClassFacts] | None] | None = None

    def per_function(self, fn: Function, read: Callable[[Function, list[str]], _T]) -> _T:
        """``read(fn, lines)`` of the file, read once per function (a function is walked
        again as a callee, a caller, or with other inputs)."""
        key = (id(read), id(fn))
        if key not in self.read_once:
            self.read_once[key] = read(fn, self.lines)
        return cast(_T, self.read_once[key])

    def class_attrs(
        self,
        fn: Function,
        cache: dict[int, frozenset[str]],
        scan: Callable[[ast.ClassDef], frozenset[str]],
    ) -> frozenset[str]:
        """``scan`` of the class whose method ``fn`` is (read once per class into ``cache``);
        empty when ``fn`` is no method of a class of the file."""
        owner = self.program.owner_of(fn)
        cls = self.program.classes.get(owner) if owner else None
        if cls is None:
            return frozenset()
        if id(cls) not in cache:
            cache[id(cls)] = scan(cls)
        return cache[id(cls)]

    def nested_in(self, fn: ast.AST, name: str) -> Function | None:
        """The function ``name`` defined inside ``fn`` (``def ease(t): ...`` in forward);
        a name no indented ``def`` of the file spells is none, without a walk."""
        if self.indented_defs is None:
            found = (_INDENTED_DEF.match(line) for line in self.lines)
            self.indented_defs = frozenset(m.group(1) for m in found if m)
        if name not in self.indented_defs:
            return None
        return self._nested(fn).get(name)

    def _nested(self, fn: ast.AST) -> dict[str, Function]:
        """The functions defined inside ``fn``, by name (found once)."""
        if id(fn) not in self.nested:
            found: dict[str, Function] = {}
            for node in walk(fn):
                if node is not fn and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.setdefault(node.name, node)
            self.nested[id(fn)] = found
        return self.nested[id(fn)]

    def names_of(self, fn: ast.AST) -> dict[str, list[ast.Name]]:
        """Every ``Name`` node of ``fn`` by name, in source order (found once)."""
        if id(fn) not in self.name_maps:
            self.name_maps[id(fn)] = names_of(fn)
        return self.name_maps[id(fn)]

    def statements_of(self, fn: ast.AST) -> dict[int, tuple[ast.AST, ast.AST]]:
        """The statements found to hold nodes of ``fn`` (see :meth:`Context.statement_of`),
        shared by every context of ``fn``."""
        return self.stmt_maps.setdefault(id(fn), {})

    def parents_of(self, fn: ast.AST) -> dict[int, ast.AST]:
        """``id(node) -> parent`` over ``fn`` (built once)."""
        if id(fn) not in self.parent_maps:
            self.parent_maps[id(fn)] = parent_map(fn)
        return self.parent_maps[id(fn)]

    def returns(self, fn: Function) -> list[ast.expr]:
        """The values ``fn`` returns (read once)."""
        if id(fn) not in self.returned:
            self.returned[id(fn)] = returns_of(fn)
        return self.returned[id(fn)]

    def callers(self, fn: Function) -> list[CallSite]:
        """The calls of ``fn`` in the file (found once)."""
        if id(fn) not in self.sites:
            if self.index is None:
                self.index = CallIndex(self.program, self.lines)
            self.sites[id(fn)] = call_sites(self.program, fn, self.index)
        return self.sites[id(fn)]

    def reads(self, fn: Function, attr: str) -> list[tuple[Context, ast.Attribute]]:
        """Every read of ``self.<attr>`` in the methods of ``fn``'s class, each in its
        method's walked context (none when ``fn`` is no method of a class of the file)."""
        owner = self.program.owner_of(fn)
        if owner is None:
            return []
        if self.index is None:
            self.index = CallIndex(self.program, self.lines)
        facts = self.index.facts_of(owner)
        return [
            (self.context(reader, facts, reader.name == "forward"), node)
            for reader, node in self.index.reads(owner, attr)
        ]

    def held(self, attr: str) -> list[tuple[Context, ast.Attribute]]:
        """Every read of ``<name>.<attr>`` of an object other than ``self`` in the file, each
        in its function's walked context."""
        if self.index is None:
            self.index = CallIndex(self.program, self.lines)
        index = self.index
        return [
            (self.context(fn, index.facts_of(cls), fn.name == "forward"), node)
            for fn, cls, node in index.held(attr)
        ]

    def context(self, fn: Function, facts: ClassFacts, is_forward: bool) -> Context:
        if id(fn) not in self.cache:
            self.cache[id(fn)] = self.walk(fn, facts, is_forward, self, None)
        return self.cache[id(fn)]

    def given(self, fn: Function, inputs: dict[str, bool], facts: ClassFacts = NO_FACTS) -> Context:
        """``fn`` (a function, or a method of the class ``facts`` describes) walked with
        ``inputs`` floating: what one call that passes them returns (walked once per set of
        inputs)."""
        key = (id(fn), tuple(sorted(inputs.items())))
        if key not in self.given_cache:
            self.given_cache[key] = self.walk(fn, facts, False, self, inputs)
        return self.given_cache[key]

    def close(self) -> None:
        """Drop the walked contexts: they refer back to this object, and the cycle would
        keep the file's whole tree alive until the garbage collector's next full pass."""
        self.cache.clear()
        self.given_cache.clear()
