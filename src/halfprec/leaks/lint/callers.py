"""Where a same-file function's result goes: the calls of it in the same file.

:mod:`.fate` follows an fp32 tensor that a helper returns back into each caller, and the
output of a module's ``forward`` into each module of the file that holds it as a
submodule. Recognised calls:

- ``name(...)`` of a module-level function, from any function of the file;
- ``self.name(...)`` of a method, from the methods of its own class;
- ``self.x(...)`` or ``self.x[i](...)`` where ``self.x = Cls(...)`` and ``forward`` is
  ``Cls``'s, from the methods of any class of the file.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from halfprec.leaks.lint.classes import NO_FACTS, ClassFacts
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.scope import Function, Program


@dataclass(frozen=True)
class CallSite:
    """One call of the function: the call, the function that makes it, its class's facts,
    and whether that function is a ``forward``."""

    call: ast.Call
    caller: Function
    facts: ClassFacts
    is_forward: bool


def _functions(program: Program) -> Iterator[tuple[Function, str | None, ClassFacts]]:
    """Every module-level function and every method of a module-level class."""
    for fn in program.functions.values():
        yield fn, None, NO_FACTS
    for name, cls in program.classes.items():
        info = program.methods_of(name)
        facts = info[1] if info is not None else NO_FACTS
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield stmt, name, facts


def _self_attr(func: ast.AST) -> str | None:
    """``self.x`` or ``self.x[i]`` as the called expression: ``x``."""
    if isinstance(func, ast.Subscript):
        func = func.value
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr if func.value.id == "self" else None
    return None


class CallIndex:
    """The calls each function of one file makes, in walk order. A function is walked on
    the first question that needs it, and not at all while its text (decorators to last
    line) does not contain the called name: a call of ``name`` spells ``name`` there
    (names are compared as written only in ASCII text, which NFKC leaves as it is)."""

    def __init__(self, program: Program, lines: list[str] | None = None) -> None:
        self.functions = list(_functions(program))
        self.lines = lines
        self._calls: dict[int, list[ast.Call]] = {}
        self._texts: dict[int, str] = {}

    def calls_in(self, fn: Function, names: AbstractSet[str]) -> list[ast.Call]:
        """The calls ``fn`` makes; ``[]`` when its text names none of ``names``."""
        if self.lines is not None:
            text = self._texts.get(id(fn))
            if text is None:
                first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
                text = self._texts[id(fn)] = "\n".join(self.lines[first - 1 : fn.end_lineno])
            if text.isascii() and not any(name in text for name in names):
                return []
        calls = self._calls.get(id(fn))
        if calls is None:
            calls = self._calls[id(fn)] = [n for n in walk(fn) if isinstance(n, ast.Call)]
        return calls


def call_sites(program: Program, fn: Function, index: CallIndex | None = None) -> list[CallSite]:
    """The calls of ``fn`` in its file (see the module docstring); ``index``: the file's
    :class:`CallIndex`, shared between questions."""
    top = program.functions.get(fn.name) is fn
    owner = None if top else program.owner_of(fn)
    if not top and owner is None:
        return []  # a nested function: its calls are its enclosing function's business
    index = index or CallIndex(program)
    out: list[CallSite] = []
    for caller, cls, facts in index.functions:
        if not top and fn.name != "forward" and cls != owner:
            continue
        holders = {x for x, c in facts.module_classes if c == owner}
        names = holders if not top and fn.name == "forward" else {fn.name}
        for node in index.calls_in(caller, names) if names else ():
            func = node.func
            if top:
                hit = isinstance(func, ast.Name) and func.id == fn.name
            elif fn.name == "forward":
                hit = _self_attr(func) in holders
            else:
                hit = isinstance(func, ast.Attribute) and _self_attr(func) == fn.name
            if hit:
                out.append(CallSite(node, caller, facts, caller.name == "forward"))
    return out
