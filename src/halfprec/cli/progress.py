"""A spinner with a line of status on stderr while a command works.

Silent when stderr is not a terminal (pipes, CI, tests) and with ``--json``, so that
nothing but the result reaches a script.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console


@contextmanager
def progress(text: str, *, quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """Show ``text`` with a spinner on stderr; yields a function that replaces the text."""
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield lambda _text: None
        return
    with console.status(text) as status:
        yield lambda new: status.update(new)
