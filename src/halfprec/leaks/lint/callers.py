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
from dataclasses import dataclass

from halfprec.leaks.lint.classes import NO_FACTS, ClassFacts
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


# every function of a file (see _functions) with the calls it makes, in ast.walk order
CallIndex = list[tuple[Function, str | None, ClassFacts, list[ast.Call]]]


def call_index(program: Program) -> CallIndex:
    """The calls each function of the file makes: one walk per file, shared by every
    :func:`call_sites` question about it."""
    return [
        (fn, cls, facts, [n for n in ast.walk(fn) if isinstance(n, ast.Call)])
        for fn, cls, facts in _functions(program)
    ]


def call_sites(program: Program, fn: Function, index: CallIndex | None = None) -> list[CallSite]:
    """The calls of ``fn`` in its file (see the module docstring); ``index``: the file's
    :func:`call_index`, when already built."""
    top = program.functions.get(fn.name) is fn
    owner = None if top else program.owner_of(fn)
    if not top and owner is None:
        return []  # a nested function: its calls are its enclosing function's business
    out: list[CallSite] = []
    for caller, cls, facts, calls in call_index(program) if index is None else index:
        if not top and fn.name != "forward" and cls != owner:
            continue
        holders = {x for x, c in facts.module_classes if c == owner}
        for node in calls:
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
