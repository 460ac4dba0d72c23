"""Reading a file halfprec was given: a regular file, opened without blocking, read with a bound.

Every file halfprec reads (checkpoints and their shards, indexes, recipes, inputs, model
configs, the probe cache) is opened here. ``open_regular`` opens the path with
``O_NONBLOCK``, so a FIFO without a writer cannot block the open, and then checks the
*opened descriptor* with ``fstat``: only a regular file is read. Checking the descriptor,
not the path, means the file cannot be swapped for another between the check and the
read. A FIFO, a character or block device (``/dev/zero``, ``/dev/stdin``), a socket or a
folder is :class:`NotAFileError`, which names what the path is. ``read_regular`` also
bounds the read: a file longer than ``limit`` is :class:`FileTooLargeError`, found by
reading at most ``limit + 1`` bytes (not by trusting ``st_size``).
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO (named pipe)", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotAFileError(OSError):
    """The path exists but is not a regular file; ``kind`` says what it is ("a FIFO
    (named pipe)", "a character device", "a folder", ...)."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(f"{os.fspath(path)} is {kind}, not a regular file; give a file")
        self.path = os.fspath(path)
        self.kind = kind


class FileTooLargeError(OSError):
    """The file holds more than the reader's limit."""

    def __init__(self, path: str | os.PathLike[str], limit: int) -> None:
        super().__init__(f"{os.fspath(path)} is over {limit} bytes")
        self.path = os.fspath(path)
        self.limit = limit


def unreadable(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as a regular file ("not found", "a FIFO (named
    pipe)", "a folder", ...), or None when it is one. For messages only: it never opens the
    path, and :func:`open_regular` checks again on the descriptor."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "not found"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None if stat.S_ISREG(mode) else kind_of(mode)


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder ("a
    FIFO (named pipe)", "a character device", ...; links followed), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else kind_of(mode)


def refusal(what: str, path: str | os.PathLike[str], fix: str = "check the path") -> str | None:
    """The one-line refusal of ``path`` when it is not a regular file ("inputs file x not
    found; check the path", "recipe file p is a FIFO (named pipe), not a regular file;
    give a file"), or None when it is one. ``what`` names the file's role."""
    why = unreadable(path)
    if why is None:
        return None
    if why == "not found":
        return f"{what} {os.fspath(path)} not found; {fix}"
    return f"{what} {os.fspath(path)} is {why}, not a regular file; give a file"


def special_file_in(folder: str | os.PathLike[str]) -> str | None:
    """The refusal of the first entry of ``folder`` that is neither a regular file nor a
    folder (a FIFO, a device, a socket, a link to one), or None: a model directory is read
    by libraries that open its files blindly (transformers, tokenizers), so one FIFO there
    would block them."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return None  # the caller's own check names a missing or unreadable folder
    for entry in entries:
        why = special_kind(entry.path)
        if why is not None:
            return f"{entry.path} is {why}, not a regular file; remove it from {os.fspath(folder)}"
    return None


def open_regular(path: str | os.PathLike[str]) -> io.BufferedReader:
    """``path`` opened for binary reading, after ``fstat`` on the descriptor says it is a
    regular file (see the module docs). Raises :class:`NotAFileError` otherwise, and
    ``OSError`` (``FileNotFoundError``, ``PermissionError``) as ``open`` does."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotAFileError(path, kind_of(mode))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file never blocks; reads behave as usual
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them: a longer file is
    :class:`FileTooLargeError` (at most ``limit + 1`` bytes are read to find out)."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(path, limit)
    return data


def read_text_regular(path: str | os.PathLike[str], *, limit: int) -> str:
    """:func:`read_regular` decoded as UTF-8; a leading byte-order mark is dropped
    (``utf-8-sig``), as editors on Windows write one. ``UnicodeDecodeError`` otherwise."""
    return read_regular(Path(path), limit=limit).decode("utf-8-sig")
