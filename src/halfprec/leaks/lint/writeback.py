"""An fp32 result written straight back into a half tensor's storage (see :mod:`.fate`).

``x[..., :n] = x[..., :n] + t``, ``h += t``, ``h.add_(t)`` and ``h.copy_(x + t)`` each
compute in fp32 where ``t`` is fp32, but the statement stores the result into ``h``'s (or
``x``'s) own storage, which casts it to half: no fp32 value goes on from there. The lead's
ruling judges such a site "no leak [borderline: written back into half]". A write at tensor
indices (``h[idx] = h[idx] + t``) is ``index_put_``, which raises on the dtype mismatch: that
stays a leak (see :mod:`.indexing`).

Into a slice of a tensor whose dtype the lint does not know (``r = (f0 / sr) % 1``, then
``r[:, 0] = r[:, 0] + t``) the write keeps ``r``'s dtype too: ``t`` does not decide it, so
``t``'s walk ends there; ``r`` is fp32 only where something else made it so (a site of its
own). A list or dict written into (``outs[i] = t``) holds ``t`` and is followed on.
Likewise ``g *= t`` of a name ``g`` that holds a tensor (a loop's element, a parameter, a
value of arithmetic) is in place and keeps ``g``'s dtype; of a name last bound to a number
(``total = 0``, then ``total += t``) it binds ``g`` to ``t``'s dtype, and ``g`` is followed.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import dotted
from halfprec.leaks.lint.indexing import tensor_index
from halfprec.leaks.lint.reach import Follow

_MAX_UP = 8  # expressions climbed from the op to the statement that stores it


def written_back(f: Follow, op: ast.AST) -> bool:
    """Whether the value of ``op`` (where the followed tensor met a half one) is stored
    into a half tensor's storage by the statement it is in, with nothing but arithmetic
    between (``x[:, :n] = x[:, :n] + t * 2``, ``h += t * g``, ``h.add_(t)``)."""
    parents = f.ctx.parents
    node = op
    for _ in range(_MAX_UP):
        if in_place_into_half(f, node):
            return True
        parent = parents.get(id(node))
        if isinstance(parent, ast.Assign) and parent.value is node:
            return all(_half_slot(f, t) for t in parent.targets)
        if isinstance(parent, ast.AugAssign) and parent.value is node:
            return _half_storage(f, parent.target)
        if isinstance(parent, ast.Call) and node in parent.args and in_place_into_half(f, parent):
            return True  # h.copy_(x + t)
        if not _arithmetic(f, node, parent):
            return False
        assert parent is not None
        node = parent
    return False


def in_place_into_half(f: Follow, node: ast.AST) -> bool:
    """``h.add_(...)``, ``h.copy_(...)``, ``h[:, 0].mul_(...)``: an in-place op on a half
    tensor the walk does not follow, which keeps ``h``'s dtype whatever it is given."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    method = node.func.attr
    if not method.endswith("_") or method.startswith("_") or method in _NOT_INTO:
        return False
    return _half_storage(f, node.func.value)


# these raise unless the source has the receiver's dtype (checked with torch 2.13)
_NOT_INTO = frozenset(
    {"index_copy_", "masked_scatter_", "index_put_", "put_", "index_add_", "scatter_add_"}
    | {"scatter_", "scatter_reduce_", "index_reduce_", "lerp_"}
)


def _half_slot(f: Follow, target: ast.AST) -> bool:
    """``x[..., :n]`` or ``x[0]`` of a half ``x``: a copy into its storage, not an
    ``index_put_`` (a tensor index)."""
    return (
        isinstance(target, ast.Subscript)
        and not tensor_index(target.slice, f.ctx)
        and _half_storage(f, target.value)
    )


def _half_storage(f: Follow, node: ast.AST) -> bool:
    """A half tensor the walk does not follow (``h``, ``x[:, 0]``, ``self.h``)."""
    base = node
    while isinstance(base, ast.Subscript):
        if tensor_index(base.slice, f.ctx):
            return False  # h[idx] is a copy: an in-place op on it writes nothing back
        base = base.value
    return not f.derived(base) and f.floating(base)


def _arithmetic(f: Follow, node: ast.AST, parent: ast.AST | None) -> bool:
    """``parent`` computes elementwise from ``node``: an operator, a method of the value,
    or a torch function of it."""
    if isinstance(parent, (ast.BinOp, ast.UnaryOp)):
        return True
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return True  # (x + t).clamp(...): the call is climbed next
    if isinstance(parent, ast.Call):
        if parent.func is node:
            return True
        owner = dotted(parent.func).rsplit(".", 1)[0]
        torch_call = owner in f.ctx.imports.torch or owner in f.ctx.imports.functional
        return torch_call and node in parent.args
    return False


def own_dtype_tensor(f: Follow, base: ast.Name) -> bool:
    """Whether ``base`` (written into at a slice) is last bound to a tensor computed by
    arithmetic or a torch op the walk does not follow: the write keeps its dtype."""
    bound = f.ctx.binding_before(base)
    if bound is None or f.derived(base) or any(f.reads_followed(n) for n in ast.walk(bound)):
        return False
    if any(isinstance(n, _CONTAINERS) for n in ast.walk(bound)):
        return False  # [None] * n, {k: v ...}: a container
    if isinstance(bound, (ast.BinOp, ast.UnaryOp)):
        return True
    if isinstance(bound, ast.Call):
        owner = dotted(bound.func).rsplit(".", 1)[0]
        imports = f.ctx.imports
        torch_call = owner in imports.torch or owner in imports.functional
        return torch_call and f.ctx.is_torch_attr(bound.func, *_FACTORIES) is None
    return False


_CONTAINERS = (ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
# a factory's buffer written into is followed as the walk holds it (filled tables)
_FACTORIES = ("zeros", "ones", "empty", "full", "rand", "randn", "tensor", "arange", "linspace")


def own_dtype_name(f: Follow, target: ast.Name) -> bool:
    """Whether the target of ``target op= t`` is a tensor the walk does not follow (not
    last bound to a number, ``None`` or a value made from the followed tensor)."""
    if f.derived(target):
        return False
    bound = f.ctx.binding_before(target)
    if bound is None:
        return _loop_element(f, target)
    if isinstance(bound, (ast.Constant, *_CONTAINERS)):
        return False  # total = 0, then total += t: total becomes t's dtype
    return own_dtype_tensor(f, target)


def _loop_element(f: Follow, target: ast.Name) -> bool:
    """``target`` is bound by no assignment before it but by a loop around it over
    something other than numbers (``for i, g in enumerate(grads)``): an element of a list
    of tensors. A parameter is not known to be a tensor."""
    node: ast.AST = target
    parents = f.ctx.parents
    while id(node) in parents:
        node = parents[id(node)]
        if not isinstance(node, (ast.For, ast.AsyncFor)):
            continue
        named = any(isinstance(n, ast.Name) and n.id == target.id for n in ast.walk(node.target))
        if named:
            return not any(
                isinstance(n, ast.Call) and dotted(n.func) in ("range", "len")
                for n in ast.walk(node.iter)
            )
    return False
