"""Special files (FIFOs, a link to /dev/zero) and a guard that turns a hang into a failure."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["fifo", "zero_link", "within"]


def fifo(path: Path) -> Path:
    """A FIFO (named pipe) at ``path`` with no writer: a blocking open of it never returns."""
    os.mkfifo(path)
    return path


def zero_link(path: Path) -> Path:
    """A symlink at ``path`` to ``/dev/zero``: reading it never ends, ``st_size`` is 0."""
    path.symlink_to("/dev/zero")
    return path


def within(seconds: float, fn: Callable[[], Any], *unblock: Path) -> Any:
    """``fn()``'s result or exception, or an AssertionError when it has not returned after
    ``seconds`` (then each FIFO in ``unblock`` is opened for writing once, which releases
    a reader blocked in ``open``, so the stuck thread ends with the test)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for path in unblock:
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        raise AssertionError(f"still running after {seconds} s: it blocked on a special file")
    if "error" in box:
        raise box["error"]
    return box.get("value")
