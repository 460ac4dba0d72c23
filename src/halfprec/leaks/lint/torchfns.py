"""Torch functions a module holds as attributes (``self.permute = F.conv2d``,
``self.mix = torch.matmul if flat else torch.bmm``): a call of one is that torch function,
so a followed tensor given to it meets the other tensors of the call as it would in
``F.conv2d(x, w)`` (see :mod:`.arguments`), where a call of an attribute the lint cannot
see into would end the walk.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context, dotted
from halfprec.leaks.lint.nodes import self_assignments


def held_torch_function(ctx: Context, func: ast.AST) -> bool:
    """Whether ``func`` is ``self.<attr>`` that every assignment in the walked method's
    class binds to a function of torch (``torch.mm``, ``F.conv2d``)."""
    calls, fn = ctx.calls, ctx.function
    if not (isinstance(func, ast.Attribute) and dotted(func.value) == "self"):
        return False
    if calls is None or not isinstance(fn, ast.FunctionDef) or func.attr in ctx.facts.methods:
        return False
    if any(attr == func.attr for attr, _ in ctx.facts.layers):
        return False  # self.proj = nn.Linear(...): a module, the commonest call
    scan = lambda cls: _torch_attrs(cls, ctx)  # noqa: E731
    return func.attr in calls.class_attrs(fn, calls.torch_fn_attrs, scan)


def _torch_attrs(cls: ast.ClassDef, ctx: Context) -> frozenset[str]:
    """The attributes every ``self.<attr> = ...`` of ``cls`` binds to torch functions."""
    made = self_assignments(cls)
    return frozenset(a for a, values in made.items() if all(_of_torch(v, ctx) for v in values))


def _of_torch(value: ast.AST, ctx: Context) -> bool:
    """``F.conv2d``, ``torch.nn.functional.conv1d``, ``torch.mm``; either of an ``IfExp``;
    one picked from a display of them (``{1: F.conv1d, 2: F.conv2d}[rank]``)."""
    if isinstance(value, ast.IfExp):
        return _of_torch(value.body, ctx) and _of_torch(value.orelse, ctx)
    if isinstance(value, ast.Subscript) and isinstance(
        value.value, (ast.Dict, ast.List, ast.Tuple)
    ):
        shown = value.value
        held = shown.values if isinstance(shown, ast.Dict) else shown.elts
        return bool(held) and all(_of_torch(v, ctx) for v in held)
    if not isinstance(value, ast.Attribute):
        return False
    owner = dotted(value.value)
    imports = ctx.imports
    return (
        owner in imports.torch
        or owner in imports.functional
        or owner.endswith("nn.functional")
        and owner.split(".", 1)[0] in imports.torch
    )
