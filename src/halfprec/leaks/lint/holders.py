"""What the modules that hold a class pass to its ``forward``: a parameter of ``forward`` is
taken as half (the model's dtype) unless every call of the module that its file shows
passes it a value the lint does not know as a floating tensor of the model's dtype and
casts the module's result to a dtype afterwards (fp32 diffusion times drawn from a Beta
distribution, embedded by a sinusoidal module, the embedding cast to the weights' dtype by
each holder). A module no call of its file holds keeps the assumption: it may be the
model; so does one whose result some holder uses uncast.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.callers import argument_for
from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.values import value_of


def fed_half(ctx: Context, node: ast.AST) -> bool:
    """Whether ``node``, a floating name where it is read, may hold a half tensor: False
    only for a parameter of ``forward``, never rebound, that every holder of the module in
    the file passes a value not known as half, casting the module's result after."""
    fn, calls = ctx.function, ctx.calls
    while isinstance(node, ast.Subscript):  # x[:, None]: x's values
        node = node.value
    if not (isinstance(node, ast.Name) and ctx.is_forward and calls is not None):
        return True
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    a = fn.args
    param = next((p for p in (*a.args[1:], *a.kwonlyargs) if p.arg == node.id), None)
    if param is None or _rebound(fn, node.id):
        return True
    sites = calls.callers(fn)
    if not sites:
        return True
    for site in sites:
        arg = argument_for(fn, site.call, param, method=True)
        if arg is None:
            return True  # its default, or passed through *args: not seen
        held = calls.context(site.caller, site.facts, site.is_forward)
        if value_of(arg, held.at(arg)) is not None or not _cast_after(held, site.call):
            return True
    return False


def _cast_after(ctx: Context, call: ast.Call) -> bool:
    """Whether the holder binds the module's result to a name and casts that name to a
    dtype later in the function (``emb = self.time_embed(t)`` ... ``emb.to(dtype=w)``)."""
    stmt = ctx.statement_of(call)
    if not (isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1):
        return False
    target = stmt.targets[0]
    if not isinstance(target, ast.Name) or ctx.function is None:
        return False
    for n in walk(ctx.function):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
            continue
        owner = n.func.value
        if not (isinstance(owner, ast.Name) and owner.id == target.id):
            continue
        if getattr(n, "lineno", 0) <= stmt.lineno:
            continue
        if n.func.attr in ("type_as", "half", "bfloat16"):
            return True
        if n.func.attr in ("to", "type") and (
            any(k.arg == "dtype" for k in n.keywords) or _dtype_arg(n.args)
        ):
            return True
    return False


def _dtype_arg(args: list[ast.expr]) -> bool:
    """``.to(x.dtype)``, ``.to(dtype)``, ``.to(weight_dtype)``: a dtype, not a device."""
    return any(
        isinstance(a, ast.Attribute)
        and a.attr == "dtype"
        or isinstance(a, ast.Name)
        and a.id.endswith("dtype")
        for a in args
    )


def _rebound(fn: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in walk(fn)
    )
