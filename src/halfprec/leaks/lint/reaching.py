"""The values a name may hold where it is read: every assignment that can reach the read,
not only the last one written above it.

``i = torch.floor(torch.rand(n) * 2)`` then ``if debug is not None: i = torch.full_like(i,
d)`` then ``m = m @ helper(i)``: the read of ``i`` holds either value, so ``i`` is fp32 on
purpose (an explicit ``dtype=torch.float32`` of ``d``) only if both are. An assignment
inside an ``if``, a ``try``'s handler or a ``match`` case that does not hold the read may
not run, so the assignments above it reach the read too; an ``if`` whose two branches both
assign hides what came before it. Loops are taken as running (their body's assignment
is the one read after them), as the rest of the lint takes them.
"""

from __future__ import annotations

import ast
from typing import Protocol

_MAX_VALUES = 8  # assignments looked at for one read


class Context(Protocol):
    """What this module reads of :class:`.context.Context` (which reads values through
    this module)."""

    @property
    def parents(self) -> dict[int, ast.AST]: ...

    def statement_of(self, node: ast.AST) -> ast.AST: ...

    def names(self, name: str) -> list[ast.Name]: ...


def reaching_values(ctx: Context, use: ast.Name) -> list[ast.AST]:
    """The values assigned to ``use``'s name that may reach ``use``, latest first; empty
    when none is seen (a parameter)."""
    here = ctx.statement_of(use)
    where = (use.lineno, use.col_offset)
    bound: list[ast.Assign | ast.AnnAssign] = []
    for node in ctx.names(use.id):
        if (node.lineno, node.col_offset) >= where:
            break
        owner = ctx.statement_of(node)
        if owner is here or not isinstance(node.ctx, ast.Store):
            continue
        if isinstance(owner, (ast.Assign, ast.AnnAssign)) and owner.value is not None:
            bound.append(owner)
    values: list[ast.AST] = []
    covered: dict[int, set[str]] = {}  # an if whose branches assign: which ones do
    for owner in reversed(bound[-_MAX_VALUES:]):
        assert owner.value is not None
        values.append(owner.value)
        branches = _conditions(ctx, owner, here)
        if not branches:
            break  # it runs on every way to the read: nothing earlier reaches it
        outer, side = branches[-1]
        covered.setdefault(id(outer), set()).add(side)
        if len(covered[id(outer)]) == 2 and len(branches) == 1:
            break  # if c: i = a / else: i = b: what was before the if is hidden
    return values


def _conditions(ctx: Context, stmt: ast.AST, use: ast.AST) -> list[tuple[ast.AST, str]]:
    """The branches holding ``stmt`` that do not hold ``use`` (innermost first): the
    ``if`` (its ``body`` or ``orelse``), ``try`` (a handler) or ``match`` each belongs to."""
    above = _ancestors(ctx, use)
    found: list[tuple[ast.AST, str]] = []
    parents, node = ctx.parents, stmt
    while id(node) in parents:
        parent = parents[id(node)]
        if id(parent) in above:
            break
        if isinstance(parent, ast.If):
            found.append((parent, "body" if any(s is node for s in parent.body) else "orelse"))
        elif isinstance(parent, (ast.ExceptHandler, ast.match_case)):
            found.append((parent, "handler"))
        node = parent
    return found


def _ancestors(ctx: Context, node: ast.AST) -> set[int]:
    parents, found = ctx.parents, {id(node)}
    while id(node) in parents:
        node = parents[id(node)]
        found.add(id(node))
    return found
