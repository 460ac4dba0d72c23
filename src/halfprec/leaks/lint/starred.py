"""Names a package hands on with ``from .module import *`` (see :mod:`.imported`).

``from ..utils import apply_reduction`` where ``utils/__init__.py`` says ``from .utils
import *``: the helper is defined in ``utils/utils.py``, and :mod:`.imported` found it only
where the ``__init__.py`` names it. Each star import of a file is kept under a key that no
name can be (``"*1.utils"``), and a name the file does not import by name is sought in the
modules it star-imports, in their order: the first that binds it at its top level (``def
name``, ``class name``, ``name = ...``) or imports it by name there is the one it comes from.
A module's text is read, never parsed, to decide that; whoever asks then loads that module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

Entry = tuple[str, int, str]  # (module, level, name there), as :mod:`.imported` keeps them
T = TypeVar("T")

_MAX_STARS = 8  # star-imported modules of one file looked into for a name
_BOUND = re.compile(r"^(?:(?:async[ \t]+)?def|class)[ \t]+(\w+)|^(\w+)[ \t]*[:=]", re.M)
_IMPORTS = re.compile(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]+\(?([\w, \t]+)", re.M)


def star_key(module: str | None, level: int) -> str:
    """The key of ``from <level dots><module> import *`` among a file's imported names."""
    return f"*{level}.{module or ''}"


def top_names(text: str) -> frozenset[str]:
    """The names a module's ``text`` binds at its top level or imports by name."""
    names = {a or b for a, b in _BOUND.findall(text)}
    for listed in _IMPORTS.findall(text):
        names.update(part.split()[-1] for part in listed.split(",") if part.split())
    return frozenset(names)


def through_stars(
    imported: dict[str, Entry],
    name: str,
    names_of: Callable[[Entry], frozenset[str]],
    find: Callable[[Entry], T | None],
) -> T | None:
    """What ``find`` returns for ``name`` in the first module that the file of ``imported``
    star-imports and that binds ``name`` (``names_of`` gives a module's :func:`top_names`)."""
    stars = [entry for key, entry in imported.items() if key.startswith("*")]
    for module, level, _ in stars[:_MAX_STARS]:
        entry = (module, level, name)
        if name in names_of(entry):
            return find(entry)
    return None
