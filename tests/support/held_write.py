"""Runs ``python -m halfprec ARGS`` with its first write held open, so a test can signal it
mid-write at a known moment instead of racing a poll for the temp file.

Usage: python held_write.py POINT FOLDER READY_FD GO_FD ARGS... POINT is ``created`` (the
first ``.halfprec-*.tmp`` file or folder in FOLDER has just been made) or ``renaming`` (it is
about to be renamed onto its target). There the process writes the temp's name and a newline to
READY_FD, then blocks reading GO_FD: a signal's handler interrupts that read where the write
stands; end of file (the test closed GO_FD) lets the write go on.
"""

from __future__ import annotations

import os
import re
import runpy
import sys
from typing import Any

_TEMP = re.compile(r"^\.halfprec-\d+-[0-9a-f]+\.tmp$")
_real = {"open": os.open, "mkdir": os.mkdir, "replace": os.replace}


def _hold(point: str, folder: str, ready_fd: int, go_fd: int) -> None:
    held = False

    def wait_at(path: Any) -> None:
        nonlocal held
        where, name = os.path.split(os.path.abspath(os.fspath(path)))
        if held or where != os.path.abspath(folder) or not _TEMP.match(name):
            return
        held = True
        os.write(ready_fd, f"{os.fspath(path)}\n".encode())
        os.read(go_fd, 1)

    def opened(path: Any, *args: Any, **kwargs: Any) -> int:
        fd: int = _real["open"](path, *args, **kwargs)
        wait_at(path)
        return fd

    def made(path: Any, *args: Any, **kwargs: Any) -> None:
        _real["mkdir"](path, *args, **kwargs)
        wait_at(path)

    def renamed(src: Any, dst: Any, **kwargs: Any) -> None:
        wait_at(src)
        _real["replace"](src, dst, **kwargs)

    if point == "created":
        os.open, os.mkdir = opened, made  # type: ignore[assignment]
    elif point == "renaming":
        os.replace = renamed
    else:
        raise SystemExit(f"unknown POINT {point!r}: created or renaming")


if __name__ == "__main__":
    _hold(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    sys.argv = ["halfprec", *sys.argv[5:]]
    runpy.run_module("halfprec", run_name="__main__", alter_sys=True)
