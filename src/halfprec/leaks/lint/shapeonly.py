"""The parts of an expression that carry a tensor's values, not only its shape.

``code = self.code.unsqueeze(1).repeat(1, grid.shape[1], 1)`` reads ``grid`` only for a
size: ``code`` holds none of ``grid``'s values, so where ``grid`` later meets ``code``
(``torch.cat([grid, code], dim=2)``) it meets another tensor, in that tensor's dtype. A read
of ``t.shape``, ``t.size(...)``, ``t.ndim``, ``t.dim()``, ``t.numel()``, ``t.device`` or
``len(t)`` of a name ``t`` is such a read; ``t.dtype`` is not (a tensor made in it has
``t``'s dtype).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from halfprec.leaks.lint.nodes import children

_SHAPE_ATTRS = frozenset({"shape", "ndim", "device", "is_cuda"})
_SHAPE_CALLS = frozenset({"size", "dim", "numel", "get_device"})


def _shape_read(node: ast.AST) -> bool:
    """``t.shape``, ``t.size(1)``, ``len(t)``... of a name ``t``."""
    if isinstance(node, ast.Attribute) and node.attr in _SHAPE_ATTRS:
        return isinstance(node.value, ast.Name)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _SHAPE_CALLS:
        return isinstance(func.value, ast.Name)
    return (
        isinstance(func, ast.Name)
        and func.id == "len"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Name)
    )


def value_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``node`` (breadth first, as :func:`~.nodes.walk`), without those under
    a read of a name's shape."""
    todo = [node]
    while todo:
        here = todo.pop()
        if _shape_read(here):
            continue
        yield here
        todo += children(here)
