"""The methods that share one module's state: ``self.mask`` written in one class's method is
read by the methods of every class the object may be, not only the writer's own.

``class Decoder(PointerBase)`` whose ``forward`` ends with ``self.mask = torch.zeros(1)``
hands that tensor to the next call's ``PointerBase.step`` (``scores - self.mask * 1e9``);
a write in a base class reaches the reads of the classes derived from it. So the reads of
``self.<attr>`` are sought in the writer's class, its bases of the same file (and theirs),
the classes of the file derived from it, and the bases it imports from another file of the
tree (see :mod:`.imported`), each read in its own file's walked context.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Calls, Context
from halfprec.leaks.lint.scope import Function

_MAX_CLASSES = 12
# methods a base class of another file is likely to define, to find its file and class
_PROBES = ("__init__", "forward")


def related_reads(calls: Calls, fn: Function, attr: str) -> list[tuple[Context, ast.Attribute]]:
    """The reads of ``self.<attr>`` in the classes related to ``fn``'s (module docstring),
    not those of ``fn``'s own class (:meth:`Calls.reads` gives them)."""
    program = calls.program
    owner = program.owner_of(fn)
    if owner is None:
        return []
    found: list[tuple[Context, ast.Attribute]] = []
    for name in _related(program.classes, owner):
        method = _a_method(program.classes[name])
        if method is not None:
            found.extend(calls.reads(method, attr))
    for base in _bases_elsewhere(program.classes, owner):
        for probe in _PROBES:
            there = calls.method(base, probe) if calls.method is not None else None
            if there is not None:
                found.extend(there[0].reads(there[1], attr))
                break
    return found


def _bases(cls: ast.ClassDef) -> list[str]:
    return [b.id for b in cls.bases if isinstance(b, ast.Name)]


def _related(classes: dict[str, ast.ClassDef], owner: str) -> list[str]:
    """The same-file ancestors of ``owner`` and the classes derived from it (not itself)."""
    up = _ancestors(classes, owner)
    down: list[str] = []
    grew = True
    while grew and len(down) < _MAX_CLASSES:
        grew = False
        for name, cls in classes.items():
            if name in down or name == owner or name in up:
                continue
            if any(b == owner or b in down for b in _bases(cls)):
                down.append(name)
                grew = True
    return up + down


def _a_method(cls: ast.ClassDef) -> Function | None:
    """One method of ``cls``, whose owner is ``cls`` (to ask for its class's reads)."""
    return next(
        (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None
    )


def _bases_elsewhere(classes: dict[str, ast.ClassDef], owner: str) -> list[str]:
    """The bases of ``owner`` and of its same-file ancestors that this file does not define."""
    out: list[str] = []
    for name in [owner, *_ancestors(classes, owner)]:
        out.extend(b for b in _bases(classes[name]) if b not in classes and b not in out)
    return out


def _ancestors(classes: dict[str, ast.ClassDef], owner: str) -> list[str]:
    """The same-file bases of ``owner``, theirs, and so on."""
    seen: list[str] = []
    todo = [owner]
    while todo and len(seen) < _MAX_CLASSES:
        for base in _bases(classes[todo.pop()]):
            if base in classes and base not in seen and base != owner:
                seen.append(base)
                todo.append(base)
    return seen
