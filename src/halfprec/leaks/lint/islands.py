"""An fp32 island: a block a function runs in fp32 on purpose and casts back.

``dtype = x.dtype; x = x.float(); ...; return y.type(dtype)``: between the upcast and the
cast back the values are fp32 because of the upcast (HP201's to judge). A buffer made fp32
there (``buf = torch.zeros(n)``) and filled from the upcast values (``buf[i] = f(x)``)
holds what it would hold if made in ``x.dtype`` after the upcast, so its meeting with the
module's weights, which the upcast values meet as well, is not its own leak. It is still a
leak where it meets another half value or leaves the function uncast.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.nodes import walk

_DEPTH = 8  # names followed back from a value to the upcast it is made from


def island_buffer(node: ast.AST, ctx: Context) -> bool:
    """Whether ``node`` makes a buffer of an fp32 island: bound to a name that is filled by
    subscript from values made from an explicit upcast, in a function that casts back to a
    dtype it saved (``dtype = x.dtype`` ... ``.type(dtype)``)."""
    func = ctx.function
    bound = ctx.parents.get(id(node))
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if not (isinstance(bound, ast.Assign) and bound.value is node and len(bound.targets) == 1):
        return False
    target = bound.targets[0]
    return isinstance(target, ast.Name) and _casts_back(func) and _filled(target.id, func, ctx)


def island_value(node: ast.AST, ctx: Context) -> bool:
    """Whether ``node``, met in an island, is fp32 there: a weight of the module (the upcast
    values meet it as well), a value made from the upcast, or one read from a buffer filled
    from it (``einsum("bi,io->bo", other_buf, self.w)``)."""
    func = ctx.function
    if _weight(node) or _from_upcast(node, ctx, _DEPTH):
        return True
    return isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        isinstance(n, ast.Name) and _filled(n.id, func, ctx) for n in walk(node)
    )


def _filled(name: str, func: ast.FunctionDef | ast.AsyncFunctionDef, ctx: Context) -> bool:
    """Whether ``func`` stores into ``name`` by subscript a value made from an upcast."""
    return any(
        isinstance(s, ast.Assign)
        and any(_fills(t, name) for t in s.targets)
        and _from_upcast(s.value, ctx, _DEPTH)
        for s in walk(func)
    )


def _weight(node: ast.AST) -> bool:
    """``self.w``, ``self.w[0]``: a tensor the module holds, not a value of this call."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and (node.value.id == "self")
    )


def _fills(target: ast.AST, name: str) -> bool:
    """``buf[...] = v``: a store into the tensor bound to ``name``."""
    return isinstance(target, ast.Subscript) and (
        isinstance(target.value, ast.Name) and target.value.id == name
    )


def _from_upcast(value: ast.AST, ctx: Context, depth: int) -> bool:
    """Whether ``value`` is made from an explicit upcast, through at most ``depth`` names."""
    if ctx.is_upcast(value):
        return True
    if depth == 0:
        return False
    for sub in walk(value):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            bound = ctx.binding_before(sub)
            if bound is not None and _from_upcast(bound, ctx, depth - 1):
                return True
    return False


def _casts_back(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``func`` saves a tensor's dtype (``dtype = x.dtype``) and casts to it
    (``.type(dtype)``, ``.to(dtype)``, ``.to(dtype=dtype)``)."""
    saved = {
        s.targets[0].id
        for s in walk(func)
        if isinstance(s, ast.Assign)
        and len(s.targets) == 1
        and isinstance(s.targets[0], ast.Name)
        and isinstance(s.value, ast.Attribute)
        and s.value.attr == "dtype"
        and isinstance(s.value.value, ast.Name)
    }
    for call in walk(func):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            continue
        if call.func.attr in ("type", "to"):
            args = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
            if any(isinstance(a, ast.Name) and a.id in saved for a in args):
                return True
    return False
