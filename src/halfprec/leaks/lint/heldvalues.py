"""The values a dict attribute holds, read back whole (see :mod:`.methods`).

``self.means[k] = torch.zeros(d)`` in a helper that ``forward`` calls, then ``for k, proto
in self.means.items(): x - proto``: :func:`~.reach.to_readers` follows the tensor to every
read of ``self.means``, and there ``.items()``, ``.values()``, ``.pop(k)``, ``.get(k)`` and
``.copy()`` hand on what the dict holds, as they do for a dict bound to a name. Before, a
read of a followed attribute through one of them ended the walk as unknown.
"""

from __future__ import annotations

import ast

from halfprec.leaks.lint.context import words
from halfprec.leaks.lint.reach import Follow

_HANDS_ON = words("values items pop get copy")


def held_values(f: Follow, node: ast.AST, name: str) -> bool:
    """Whether ``node.<name>(...)`` reads the values of a followed ``self`` attribute that
    holds the tensor (``self.means.items()``), not of a half tensor."""
    return (
        name in _HANDS_ON
        and isinstance(node, ast.Attribute)
        and f.reads_followed(node)
        and not f.floating(node)
    )
