"""What each rule check needs to see before it can report: read from the nodes alone.

Each check (:func:`.factories.check_factory`, :func:`.casts.check_casts`,
:func:`.constants.check_constants`) returns at once unless the node it is handed has a
shape that needs neither the walked names nor the file's other functions to see: a call of
``torch.<factory>``, a large number literal, an upcast method. A function none of whose
nodes has a shape that an enabled check needs cannot be reported on, so the engine does not
walk it (the walk binds every name and follows every tensor: most of a file's time).

Each trigger here is a superset of its check's first test; a check that learns a new shape
to report on must add it here too (``tests/leaks/lint/test_triggers.py`` runs every check
on nodes no trigger admits).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from halfprec import ops
from halfprec.leaks.lint.nodes import walk

__all__ = ["Trigger", "fill_or_constant", "torch_factory", "upcast", "triggered"]

Trigger = Callable[[ast.AST, frozenset[str]], bool]  # node, the names bound to torch
FP16_MAX = 65504.0
_UPCASTS = frozenset({"float", "double", "to", "type", "get_default_dtype"})


def _torch_attr(func: ast.expr, torch: frozenset[str], names: frozenset[str]) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in torch
        and func.attr in names
    )


def torch_factory(node: ast.AST, torch: frozenset[str]) -> bool:
    """HP1: a call of ``torch.<factory>`` (``torch.zeros``, ``torch.arange``...)."""
    return isinstance(node, ast.Call) and _torch_attr(node.func, torch, ops.FACTORY_OPS)


def _big_number(node: ast.AST) -> bool:
    """A number literal (under unary ``-``/``+``) beyond the fp16 range, or one too large
    to be a float."""
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
        return False
    if not isinstance(node.value, (int, float)):
        return False
    try:
        return abs(float(node.value)) > FP16_MAX
    except OverflowError:
        return True


def fill_or_constant(node: ast.AST, torch: frozenset[str]) -> bool:
    """HP3: ``a * -1e9`` (also ``+``/``-``) with a number beyond the fp16 range,
    ``torch.finfo(...)``, or a fill op (``masked_fill``...) given such a number."""
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, (ast.Mult, ast.Add, ast.Sub)) and (
            _big_number(node.left) or _big_number(node.right)
        )
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if _torch_attr(node.func, torch, frozenset({"finfo"})):
        return True
    if not ops.is_fill(node.func.attr):
        return False
    return any(_big_number(a) for a in (*node.args, *(k.value for k in node.keywords)))


def upcast(node: ast.AST, torch: frozenset[str]) -> bool:
    """HP2: ``.float()``/``.double()``/``.to(...)``/``.type(...)``, a ``dtype=`` keyword, or
    ``torch.get_default_dtype()``."""
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute) and node.func.attr in _UPCASTS:
        return True
    return any(k.arg == "dtype" for k in node.keywords)


def triggered(fn: ast.AST, triggers: list[Trigger], torch: frozenset[str]) -> bool:
    """Whether some node of ``fn`` has a shape one of ``triggers`` admits."""
    if not triggers:
        return False
    for node in walk(fn):
        if isinstance(node, (ast.Call, ast.BinOp)) and any(t(node, torch) for t in triggers):
            return True
    return False
