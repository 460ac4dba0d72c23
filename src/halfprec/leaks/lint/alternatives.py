"""A factory's tensor made as the alternative to fp32 the library asks for: the lead's
ruling (b) (docs/leaks.md, "fp32 the library asks for") where the two meet in one name.

``m = mask.float() if mask is not None else torch.ones(b, n)`` binds ``m`` to fp32 on
purpose on one arm and to the factory's tensor on the other: whatever reads ``m`` was
written for the library's fp32, and ``dtype=h.dtype`` at the factory would only make the
two arms differ. The same holds for the statement form::

    if mask is not None:
        m = mask.float()
    else:
        m = torch.ones(b, n)

The factory's name must be read only after the ``if`` (where either value may arrive): one
read in its own branch first (``ce = torch.zeros(n); ce.scatter_add_(...)``) is followed.
A factory whose other arm is no such value (``m = mask if ... else torch.ones(b, n)``, a
``mask`` of the model's dtype) is followed as before.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.asked import asked_fp32
from halfprec.leaks.lint.context import Context, words

_MOVES = words("to view reshape unsqueeze expand contiguous")  # t.to(device): still t


def asked_alternative(node: ast.AST, ctx: Context) -> bool:
    """Whether the factory's tensor made at ``node`` is one arm of a conditional expression,
    or the value bound in one branch of an ``if``/``else``, whose other arm or branch binds
    the same name to fp32 the library asks for (see the module docstring)."""
    node = _moved(node, ctx)
    parent = ctx.parents.get(id(node))
    if isinstance(parent, ast.IfExp) and parent.test is not node:
        other = parent.orelse if parent.body is node else parent.body
        return asked_fp32(other, ctx.at(other))
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1):
        return False
    target = parent.targets[0]
    branch = ctx.parents.get(id(parent))
    if not isinstance(target, ast.Name) or not isinstance(branch, ast.If):
        return False
    if parent in branch.body:
        sibling = branch.orelse
    elif parent in branch.orelse:
        sibling = branch.body
    else:
        return False
    bound = [
        s.value
        for s in sibling
        if isinstance(s, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == target.id for t in s.targets)
    ]
    if any(_inside(use, branch, ctx) for use in ctx.uses_after(target.id, parent)):
        return False  # used in its own branch first: more than an alternative
    return bool(bound) and asked_fp32(bound[-1], ctx.at(bound[-1]))


def _inside(node: ast.AST, block: ast.AST, ctx: Context) -> bool:
    """Whether ``node`` sits inside ``block``."""
    parent = ctx.parents.get(id(node))
    while parent is not None:
        if parent is block:
            return True
        parent = ctx.parents.get(id(parent))
    return False


def _moved(node: ast.AST, ctx: Context) -> ast.AST:
    """``node`` under the device moves and reshapes applied to it on its own chain
    (``torch.ones(n).to(x.device)``)."""
    for _ in range(8):
        attr = ctx.parents.get(id(node))
        call = ctx.parents.get(id(attr)) if isinstance(attr, ast.Attribute) else None
        if not (isinstance(call, ast.Call) and isinstance(attr, ast.Attribute)):
            return node
        if call.func is not attr or attr.attr not in _MOVES:
            return node
        node = call
    return node
