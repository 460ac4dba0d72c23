"""Charts on matplotlib's object API: a :class:`matplotlib.figure.Figure` made directly,
never through ``pyplot``, so plotting neither picks a backend nor keeps figures alive in
the caller's process."""

from __future__ import annotations

import os
from typing import Any

from halfprec.atomic import atomic_path
from halfprec.errors import require


def require_matplotlib() -> Any:
    """The ``matplotlib.figure`` module, or the error naming ``pip install 'halfprec[plot]'``."""
    return require("matplotlib.figure", "plot", "--plot")


def new_figure(width: float, height: float) -> Any:
    """A new ``Figure`` of ``width`` x ``height`` inches, owned by no pyplot state."""
    return require_matplotlib().Figure(figsize=(width, height))


def save_png(fig: Any, path: str | os.PathLike[str], dpi: int) -> None:
    """Write ``fig`` to ``path`` as a PNG atomically (no partial file on failure)."""
    with atomic_path(path) as tmp:  # missing folders made, as for every file
        fig.savefig(tmp, dpi=dpi, format="png")
