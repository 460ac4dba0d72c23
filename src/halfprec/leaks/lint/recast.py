"""An attribute cast to the input's dtype in a method before the method reads it (see
:func:`.reach.to_readers`): after

    if self.table.dtype != x.dtype:
        self.table = self.table.to(dtype=x.dtype)

(or the same assignment with no ``if``), a later read of ``self.table`` in that method
reads the cast value, whatever was kept in ``self.table`` before: an fp32 table made
elsewhere reaches those reads in the input's dtype. A cast under any other condition, or
inside a loop or branch the read is not in, does not count.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import Context
from halfprec.leaks.lint.nodes import walk

_CASTS = frozenset({"type_as", "half", "bfloat16"})


def cast_before(ctx: Context, read: ast.Attribute) -> bool:
    """Whether the method ``read`` is in casts ``self.<attr>`` to a dtype not fp32 in a
    statement of its body that ends before ``read``."""
    fn = ctx.function
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    where = (read.lineno, read.col_offset)
    for stmt in fn.body:
        end = (stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)
        if end >= where:
            return False
        if _recasts(stmt, read.attr, ctx):
            return True
    return False


def _recasts(stmt: ast.stmt, attr: str, ctx: Context) -> bool:
    """``self.<attr> = self.<attr>.to(<dtype>)``, alone or as the whole body of an ``if``
    on ``self.<attr>.dtype``."""
    if isinstance(stmt, ast.If):
        on_dtype = any(
            isinstance(n, ast.Attribute) and n.attr == "dtype" and _self_attr(n.value, attr)
            for n in walk(stmt.test)
        )
        return on_dtype and not stmt.orelse and any(_recasts(s, attr, ctx) for s in stmt.body)
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return False
    if not _self_attr(stmt.targets[0], attr) or not isinstance(stmt.value, ast.Call):
        return False
    func = stmt.value.func
    if not (isinstance(func, ast.Attribute) and _self_attr(func.value, attr)):
        return False
    if func.attr in _CASTS:
        return True
    if func.attr != "to":
        return False
    wanted = [*stmt.value.args, *(k.value for k in stmt.value.keywords if k.arg == "dtype")]
    return any(_input_dtype(arg, ctx) for arg in wanted)


def _input_dtype(arg: ast.AST, ctx: Context) -> bool:
    """``x.dtype`` of a name that is not torch: a dtype read from a tensor, not fp32."""
    if not (isinstance(arg, ast.Attribute) and arg.attr == "dtype"):
        return False
    return isinstance(arg.value, ast.Name) and arg.value.id not in ctx.imports.torch


def _self_attr(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )
