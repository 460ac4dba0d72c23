"""Where a same-file function's result goes: the calls of it in the same file.

:mod:`.fate` follows an fp32 tensor that a helper returns back into each caller, and the
output of a module's ``forward`` into each module of the file that holds it as a
submodule. Recognised calls:

- ``name(...)`` of a module-level function, from any function of the file;
- ``self.name(...)`` of a method, from the methods of its own class;
- ``self.x(...)`` or ``self.x[i](...)`` where ``self.x = Cls(...)`` and ``forward`` is
  ``Cls``'s, from the methods of any class of the file;
- ``self.x.name(...)`` of another method of ``Cls`` (``self.model.encode(obs)``), and
  ``Cls.name(...)``, from the methods of any class of the file.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from halfprec.leaks.lint.classes import NO_FACTS, ClassFacts
from halfprec.leaks.lint.nodes import children, parameters
from halfprec.leaks.lint.scope import Function, Program

_Node = TypeVar("_Node", bound=ast.AST)


@dataclass(frozen=True)
class CallSite:
    """One call of the function: the call, the function that makes it, its class's facts,
    and whether that function is a ``forward``."""

    call: ast.Call
    caller: Function
    facts: ClassFacts
    is_forward: bool


def _functions(program: Program) -> Iterator[tuple[Function, str | None]]:
    """Every module-level function and every method of a module-level class."""
    for fn in program.functions.values():
        yield fn, None
    for name, cls in program.classes.items():
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield stmt, name


def _self_attr(func: ast.AST) -> str | None:
    """``self.x`` or ``self.x[i]`` as the called expression: ``x``."""
    if isinstance(func, ast.Subscript):
        func = func.value
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr if func.value.id == "self" else None
    return None


class CallIndex:
    """The calls in a file by the name called: ``name(...)``, ``self.name(...)`` or
    ``self.name[i](...)``, each with the caller's class. Only the functions whose text
    holds the name are walked, once per name."""

    def __init__(self, program: Program, lines: list[str]) -> None:
        self.program = program
        self.functions = [
            (fn, cls, "\n".join(lines[fn.lineno - 1 : fn.end_lineno or fn.lineno]))
            for fn, cls in _functions(program)
        ]
        self.found: dict[str, list[tuple[str | None, CallSite]]] = {}
        self.found_held: dict[str, list[tuple[str | None, CallSite, str]]] = {}
        self.read: dict[tuple[str, str], list[tuple[Function, ast.Attribute]]] = {}
        self.others: dict[str, list[tuple[Function, str | None, ast.Attribute]]] = {}
        self.facts: dict[str | None, ClassFacts] = {None: NO_FACTS}

    def facts_of(self, cls: str | None) -> ClassFacts:
        if cls not in self.facts:
            info = self.program.methods_of(cls) if cls else None
            self.facts[cls] = info[1] if info is not None else NO_FACTS
        return self.facts[cls]

    def _calls(self, name: str, *patterns: str) -> Iterator[tuple[str | None, CallSite]]:
        """The calls on the lines where one of ``patterns`` matches, in the functions whose
        text holds ``name``, each as a site with the caller's class. The patterns are
        compiled only when some function's text holds the name (most names are in none)."""
        compiled: list[re.Pattern[str]] = []
        for caller, cls, text in self.functions:
            if name not in text:
                continue
            compiled = compiled or [re.compile(p) for p in patterns]
            hits = set().union(*(_lines_of(caller.lineno, text, p) for p in compiled))
            for node in _nodes_on(caller, hits, ast.Call):
                yield cls, CallSite(node, caller, self.facts_of(cls), caller.name == "forward")

    def named(self, name: str) -> list[tuple[str | None, CallSite]]:
        if name not in self.found:
            # `(?<![\w.])name\s*[(\[]|self\.name\b` as two patterns, each starting with a
            # literal (which `re` scans for fast); neither's match can hide the other's
            word = re.escape(name)
            pairs = (rf"{word}(?<![\w.]{word})\s*[(\[]", rf"self\.{word}\b")
            out: list[tuple[str | None, CallSite]] = []
            for cls, site in self._calls(name, *pairs):
                func = site.call.func
                called = func.id if isinstance(func, ast.Name) else _self_attr(func)
                if called == name:
                    out.append((cls, site))
            self.found[name] = out
        return self.found[name]

    def held_named(self, name: str) -> list[tuple[str | None, CallSite, str]]:
        """Every call ``self.x.name(...)`` or ``Cls.name(...)`` in the file, with the
        caller's class and ``x`` (``self.x``) or ``Cls``."""
        if name not in self.found_held:
            word = re.escape(name)  # `\.name\s*\(` from the name on: a literal first
            out: list[tuple[str | None, CallSite, str]] = []
            for cls, site in self._calls(name, rf"{word}(?<=\.{word})\s*\("):
                holder = _holder(site.call.func, name)
                if holder is not None:
                    out.append((cls, site, holder))
            self.found_held[name] = out
        return self.found_held[name]

    def reads(self, owner: str, attr: str) -> list[tuple[Function, ast.Attribute]]:
        """Every read of ``self.<attr>`` in the methods of the class ``owner``, with the
        method that reads it; only the methods whose text holds the name are walked."""
        key = (owner, attr)
        if key not in self.read:
            pattern = re.compile(rf"self\.{re.escape(attr)}\b")
            out: list[tuple[Function, ast.Attribute]] = []
            for fn, cls, text in self.functions:
                if cls != owner or attr not in text:
                    continue
                hits = _lines_of(fn.lineno, text, pattern)
                for node in _nodes_on(fn, hits, ast.Attribute):
                    value = node.value
                    mine = isinstance(value, ast.Name) and value.id == "self"
                    if mine and node.attr == attr and isinstance(node.ctx, ast.Load):
                        out.append((fn, node))
            self.read[key] = out
        return self.read[key]

    def held(self, attr: str) -> list[tuple[Function, str | None, ast.Attribute]]:
        """Every read of ``<name>.<attr>`` of an object other than ``self``
        (``beams.scores``), in any function of the file, with the function and its class."""
        if attr not in self.others:
            pattern = re.compile(rf"(?<!self)\.{re.escape(attr)}\b")
            out: list[tuple[Function, str | None, ast.Attribute]] = []
            for fn, cls, text in self.functions:
                if attr not in text:
                    continue
                hits = _lines_of(fn.lineno, text, pattern)
                for node in _nodes_on(fn, hits, ast.Attribute):
                    value = node.value
                    other = isinstance(value, ast.Name) and value.id != "self"
                    if other and node.attr == attr and isinstance(node.ctx, ast.Load):
                        out.append((fn, cls, node))
            self.others[attr] = out
        return self.others[attr]


def _holder(func: ast.AST, name: str) -> str | None:
    """``x`` of ``self.x.name`` (an object kept on self), ``Cls`` of ``Cls.name``."""
    if not (isinstance(func, ast.Attribute) and func.attr == name):
        return None
    value = func.value
    if isinstance(value, ast.Name):
        return value.id if value.id[:1].isupper() else None
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        return value.attr if value.value.id == "self" else None
    return None


def _lines_of(first: int, text: str, pattern: re.Pattern[str]) -> set[int]:
    """The line numbers of ``pattern``'s matches in ``text``, whose first line is ``first``
    (the line ends before each match counted once, not from the start for every match)."""
    hits: set[int] = set()
    line, pos = first, 0
    for match in pattern.finditer(text):
        line += text.count("\n", pos, match.start())
        pos = match.start()
        hits.add(line)
    return hits


def _nodes_on(fn: Function, lines: set[int], kind: type[_Node]) -> Iterator[_Node]:
    """The nodes of ``kind`` in ``fn`` that span one of ``lines`` (other subtrees are not
    walked)."""
    if not lines:
        return
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        first = getattr(node, "lineno", None)
        if first is not None:
            last = getattr(node, "end_lineno", None) or first
            if not any(first <= line <= last for line in lines):
                continue
        if isinstance(node, kind):
            yield node
        stack += children(node)


def call_sites(program: Program, fn: Function, index: CallIndex) -> list[CallSite]:
    """The calls of ``fn`` in its file (see the module docstring)."""
    if program.functions.get(fn.name) is fn:
        return [site for _, site in index.named(fn.name) if isinstance(site.call.func, ast.Name)]
    owner = program.owner_of(fn)
    if owner is None:
        return []  # a nested function: its calls are its enclosing function's business
    if fn.name != "forward":
        own = [
            site
            for cls, site in index.named(fn.name)
            if cls == owner and isinstance(site.call.func, ast.Attribute)
        ]
        return own + [
            site
            for _, site, holder in index.held_named(fn.name)
            if holder == owner or (holder, owner) in site.facts.module_classes
        ]
    classes = {cls for _, cls, _ in index.functions}
    holders = {x for cls in classes for x, c in index.facts_of(cls).module_classes if c == owner}
    out: list[CallSite] = []
    for attr in sorted(holders):
        for _, site in index.named(attr):
            if (_self_attr(site.call.func), owner) in site.facts.module_classes:
                out.append(site)
    return out


def argument_for(fn: Function, call: ast.Call, param: ast.arg, method: bool) -> ast.expr | None:
    """The expression ``call`` passes to ``fn``'s parameter ``param`` (None: not passed, or
    passed through ``*args``/``**kwargs``); ``method``: ``fn``'s first parameter is self."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args][1 if method else 0 :]
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            return None
        if i < len(positional) and positional[i] is param:
            return arg
    return next((k.value for k in call.keywords if k.arg == param.arg), None)


def returns_of(fn: Function) -> list[ast.expr]:
    """The values ``fn`` returns (its nested functions' returns are theirs)."""
    out: list[ast.expr] = []
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            out.append(node.value)
        elif not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
        ):
            stack += children(node)
    return out


def flag_guards(fn: Function, node: ast.AST, parents: dict[int, ast.AST]) -> list[ast.arg]:
    """The parameters of ``fn`` that are off by default (``False``, ``None``, ``0``) and
    that an ``if`` around ``node`` tests (``if cls_token and n > 0:``): ``node`` runs only
    at a call that passes them."""
    defaults = {p: d for p, d in parameters(fn) if d is not None}
    off = {
        p.arg: p
        for p, d in defaults.items()
        if isinstance(d, ast.Constant) and d.value in (False, None, 0)
    }
    out: list[ast.arg] = []
    child, parent = node, parents.get(id(node))
    while parent is not None and off:
        if isinstance(parent, ast.If) and any(s is child for s in parent.body):
            test = parent.test
            both = isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)
            tests = test.values if isinstance(test, ast.BoolOp) and both else [test]
            out += [off[t.id] for t in tests if isinstance(t, ast.Name) and t.id in off]
        child, parent = parent, parents.get(id(parent))
    return out
