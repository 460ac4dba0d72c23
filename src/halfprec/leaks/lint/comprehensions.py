"""A followed tensor, or a list of such tensors, iterated by a comprehension (see
:mod:`.fate`): ``[drop(z) for z in zeros]``, also as one of ``zip``'s or ``enumerate``'s
iterables. Each element is followed from its uses in the element expression.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import dotted
from halfprec.leaks.lint.nodes import walk
from halfprec.leaks.lint.reach import Follow


def comprehended(f: Follow, node: ast.AST, gen: ast.comprehension) -> str:
    """``[drop(z) for z in zeros]`` over the tensor (or a list of such tensors), also as
    one of ``zip(...)``'s lists or ``enumerate``'s: each element goes where the element
    expression takes it, and the new list on from there."""
    comp = f.ctx.parents.get(id(gen))
    name = _target(node, gen)
    if name is None or not isinstance(comp, _COMPREHENSIONS):
        return "unknown"
    f.names.add(name)
    key, f.key = f.key, None  # {k: v[i] for k, v in d.items()}: each value, then its keys
    kept = comp.value if isinstance(comp, ast.DictComp) else comp.elt
    # [x for row in rows for x in row]: a later loop of the same comprehension reads it too
    later = [g.iter for g in comp.generators[comp.generators.index(gen) + 1 :]]
    # for s in scales of a one-dimensional tensor: each s is 0-dim (see .elements)
    scalar, one_dim = f.scalar, f.one_dim
    f.scalar, f.one_dim = scalar or one_dim, False
    try:
        for use in (n for part in (kept, *later) for n in walk(part)):
            if isinstance(use, ast.Name) and use.id == name and isinstance(use.ctx, ast.Load):
                f.climb(use)
                if f.fate.leaks:
                    break
    finally:
        f.key = key
        f.scalar, f.one_dim = scalar, one_dim
    return "done"


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _target(node: ast.AST, gen: ast.comprehension) -> str | None:
    """The name that takes the elements of ``node`` in ``for x in node``, ``for a, x in
    zip(h, node)``, ``for i, x in enumerate(node)`` or ``for k, x in node.items()`` (a dict
    holding the tensor, or its ``.values()``)."""
    if gen.iter is node:
        if isinstance(gen.target, ast.Name):
            return gen.target.id
        pair = gen.target.elts if isinstance(gen.target, ast.Tuple) else []
        items = isinstance(node, ast.Call) and dotted(node.func).endswith(".items")
        return pair[1].id if items and len(pair) == 2 and isinstance(pair[1], ast.Name) else None
    call, target = gen.iter, gen.target
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    if not isinstance(target, ast.Tuple) or node not in call.args or not plain_iteration(call):
        return None
    index = call.args.index(node) + (call.func.id == "enumerate")
    if call.func.id not in ("zip", "enumerate") or len(target.elts) <= index:
        return None
    named = target.elts[index]
    return named.id if isinstance(named, ast.Name) else None


def plain_iteration(call: ast.Call) -> bool:
    """``zip(a, b)``, ``zip(a, b, strict=True)``, ``enumerate(a, start=1)``: keywords that
    change no element (a ``strict`` zip only raises on unequal lengths)."""
    return all(k.arg in ("strict", "start") for k in call.keywords)


def element_source(target: ast.AST, it: ast.AST, name: str) -> ast.AST | None:
    """The iterable whose elements ``name`` takes in ``for <target> in <it>``: ``it``
    itself, or one of ``zip(...)``'s or ``enumerate(...)``'s iterables."""
    if isinstance(target, ast.Name):
        return it if target.id == name else None
    if not (isinstance(target, ast.Tuple) and isinstance(it, ast.Call)):
        return None
    func = it.func.id if isinstance(it.func, ast.Name) else ""
    if func not in ("zip", "enumerate") or not plain_iteration(it):
        return None
    names = [e.id if isinstance(e, ast.Name) else "" for e in target.elts]
    if name not in names:
        return None
    index = names.index(name) - (func == "enumerate")
    iterables = it.args[:1] if func == "enumerate" else it.args
    return iterables[index] if 0 <= index < len(iterables) else None
