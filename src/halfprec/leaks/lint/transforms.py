"""Submodules that are a library's data transforms (``torchvision.transforms``,
``kornia.augmentation``): ``self.rotate = v2.RandomAffine(degrees=30)`` holds no weights or
buffers, so ``model.half()`` changes nothing in it and its output keeps its input's dtype
(an fp32 noise map rotated by it is still fp32). :mod:`.submodules` hands a followed tensor
on through one, and :mod:`.values` gives its output the value of its input.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.scope import TRANSFORM_MODULES


def transform_layer(ctx: Context, attr: str) -> bool:
    """Whether ``self.<attr>`` is made, in the class of the walked method, by a class of a
    library of data transforms (every assignment of it, at least one)."""
    names, calls, fn = ctx.imports.transforms, ctx.calls, ctx.function
    if not names or calls is None or fn is None or not isinstance(fn, ast.FunctionDef):
        return False
    owner = calls.program.owner_of(fn)
    cls = calls.program.classes.get(owner) if owner else None
    if cls is None:
        return False
    if id(cls) not in calls.transform_attrs:
        calls.transform_attrs[id(cls)] = _transform_attrs(cls, names)
    return attr in calls.transform_attrs[id(cls)]


def _transform_attrs(cls: ast.ClassDef, names: frozenset[str]) -> frozenset[str]:
    """The attributes every ``self.<attr> = ...`` of ``cls`` binds to a data transform."""
    made: dict[str, list[str]] = {}
    for node in walk(cls):
        if not isinstance(node, ast.Assign):
            continue
        for t in node.targets:
            if isinstance(t, ast.Attribute) and dotted(t.value) == "self":
                made.setdefault(t.attr, []).append(_built(node.value))
    return frozenset(a for a, built in made.items() if all(_of_library(b, names) for b in built))


def _built(value: ast.AST) -> str:
    """The dotted class name ``value`` calls (``v2.RandomAffine``), else ``""``."""
    return dotted(value.func) if isinstance(value, ast.Call) else ""


def _of_library(name: str, names: frozenset[str]) -> bool:
    root = name.split(".", 1)[0]
    if root not in names:
        return False
    return root not in ("torchvision", "kornia") or name.startswith(TRANSFORM_MODULES)
