"""A loop variable is an alias of the element it is bound to: ``for r in regions:
r["scores"] = t`` stores ``t`` into a dict that ``regions`` holds, so the walk follows
``regions`` on after the loop too (returned, it carries ``t`` into the module's output). Also
through ``zip(regions, boxes)`` and ``enumerate(regions)``.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import dotted


def looped_container(parents: dict[int, ast.AST], name: str, at: ast.AST) -> ast.expr | None:
    """The container whose element the loop variable ``name`` is, for the innermost ``for``
    around ``at`` that binds ``name``; None when no loop binds it or the iterable is not a
    name or attribute (a call's fresh list)."""
    node: ast.AST | None = at
    while node is not None:
        if isinstance(node, (ast.For, ast.AsyncFor)) and _binds(node.target, name):
            return _source(node.iter, node.target, name)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return None
        node = parents.get(id(node))
    return None


def _binds(target: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))


def _source(iterable: ast.expr, target: ast.AST, name: str) -> ast.expr | None:
    """``regions`` of ``regions``, ``zip(regions, ...)`` at ``name``'s position, or
    ``enumerate(regions)``."""
    if isinstance(iterable, (ast.Name, ast.Attribute)):
        return iterable if isinstance(target, ast.Name) else None
    if not (isinstance(iterable, ast.Call) and isinstance(target, ast.Tuple)):
        return None
    func = dotted(iterable.func)
    elts = target.elts
    if func == "enumerate" and len(elts) == 2 and iterable.args:
        inner, held = iterable.args[0], elts[1]
    elif func == "zip":
        at = next((i for i, e in enumerate(elts) if isinstance(e, ast.Name) and e.id == name), -1)
        if not 0 <= at < len(iterable.args):
            return None
        inner, held = iterable.args[at], elts[at]
    else:
        return None
    named = isinstance(held, ast.Name) and held.id == name
    return inner if named and isinstance(inner, (ast.Name, ast.Attribute)) else None
