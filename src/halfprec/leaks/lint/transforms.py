"""Submodules that are a library's data transforms (``torchvision.transforms``,
``kornia.augmentation``): ``self.rotate = v2.RandomAffine(degrees=30)`` holds no weights or
buffers, so ``model.half()`` changes nothing in it and its output keeps its input's dtype
(an fp32 noise map rotated by it is still fp32). :mod:`.submodules` hands a followed tensor
on through one, and :mod:`.values` gives its output the value of its input.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted
from halfprec.leaks.lint.nodes import self_assignments
from halfprec.leaks.lint.scope import TRANSFORM_MODULES


def transform_layer(ctx: Context, attr: str) -> bool:
    """Whether ``self.<attr>`` is made, in the class of the walked method, by a class of a
    library of data transforms (every assignment of it)."""
    names, calls, fn = ctx.imports.transforms, ctx.calls, ctx.function
    if not names or calls is None or not isinstance(fn, ast.FunctionDef):
        return False
    scan = lambda cls: _transform_attrs(cls, names)  # noqa: E731
    return attr in calls.class_attrs(fn, calls.transform_attrs, scan)


def _transform_attrs(cls: ast.ClassDef, names: frozenset[str]) -> frozenset[str]:
    """The attributes every ``self.<attr> = ...`` of ``cls`` binds to a data transform."""
    made = self_assignments(cls)
    return frozenset(a for a, values in made.items() if all(_of_library(v, names) for v in values))


def _of_library(value: ast.expr, names: frozenset[str]) -> bool:
    """``v2.RandomAffine(...)``, ``T.Compose([...])``, ``RandomAffine(...)`` of a class
    imported from a library of data transforms."""
    name = dotted(value.func) if isinstance(value, ast.Call) else ""
    root = name.split(".", 1)[0]
    if not name or root not in names:
        return False
    return root not in ("torchvision", "kornia") or name.startswith(TRANSFORM_MODULES)
