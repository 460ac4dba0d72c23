"""What one lint run keeps beyond a file: other files' parsed trees (:mod:`.imported`,
:mod:`.keyed`) and facts read once per class or function that another file may ask again.
Each such cache is registered here, and :func:`forget` drops them all when the run ends, so
that a run leaves no trees for the garbage collector to walk (the run pauses it: see
``engine.lint_paths``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")
_CLEARS: list[Callable[[], None]] = []


def on_forget(clear: Callable[[], None]) -> None:
    """Call ``clear`` when the run ends (a cache's ``cache_clear``, a dict's ``clear``)."""
    _CLEARS.append(clear)


def run_dict(_: type[dict[_K, _V]]) -> dict[_K, _V]:
    """An empty dict that :func:`forget` empties (``run_dict(dict[str, int])``)."""
    kept: dict[_K, _V] = {}
    on_forget(kept.clear)
    return kept


def forget() -> None:
    """Drop everything the run kept."""
    for clear in _CLEARS:
        clear()
