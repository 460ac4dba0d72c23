"""Files in a cache folder: read and written without following links, in a folder only you
can change.

Cache file names are predictable (``probe-<digest>.json``) and ``HALFPREC_CACHE_DIR`` may
name a shared folder, so whoever can write that folder could plant a link named like a
cache file that points at one of your files: a write that followed it would overwrite
your file with cache JSON. So, as ssh treats ``~/.ssh``:

- the folder is refused when others can write it, unless it is sticky and yours (then
  others cannot rename or remove your files in it), and when another user owns it;
- a cache file is opened with ``O_NOFOLLOW`` (a link is never read through) and checked on
  the open descriptor to be a regular file, read with a bound;
- a cache file is written to a new temp file (``O_EXCL | O_NOFOLLOW``, mode 0600) in the
  same folder, fsynced and renamed over the name: a rename replaces a link itself, never
  the file it points to.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from halfprec.atomic import made_temp
from halfprec.readfile import FileTooLargeError, NotAFileError, kind_of

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class UnsafeCacheFolderError(PermissionError):
    """The cache folder can be changed by someone else: nothing is written in it."""


def check_folder(folder: Path) -> None:
    """Refuse (:class:`UnsafeCacheFolderError`) a folder others can write, unless sticky and
    yours, or one another user owns."""
    info = os.stat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(f"cache folder {folder} is not a folder")
    mine = info.st_uid == os.getuid()
    if not mine and info.st_uid != 0:
        raise UnsafeCacheFolderError(
            f"cache folder {folder} belongs to another user; set HALFPREC_CACHE_DIR to a "
            "folder of your own"
        )
    shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if shared and not (info.st_mode & stat.S_ISVTX and mine):
        raise UnsafeCacheFolderError(
            f"cache folder {folder} can be written by others (mode "
            f"{stat.S_IMODE(info.st_mode):o}); make it yours alone (chmod go-w) or set "
            "HALFPREC_CACHE_DIR to a private folder"
        )


def read_cache(path: Path, *, limit: int) -> bytes:
    """The bytes of the cache file ``path``: a regular file, not a link, at most ``limit``
    bytes (``OSError`` for a link, :class:`NotAFileError` for a special file,
    :class:`FileTooLargeError` past the limit)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a link
            raise NotAFileError(path, "a link (a cache file is never read through one)") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFileError(path, kind_of(info.st_mode))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise FileTooLargeError(path, limit)
    return b"".join(chunks)


def write_cache(path: Path, text: str) -> None:
    """Write ``text`` to the cache file ``path`` atomically, never through a link; the
    folder is made (0700) when missing and must pass :func:`check_folder`."""
    folder = path.parent
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_folder(folder)
    opened: list[int] = []
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC

    def make(tmp: Path) -> None:
        opened.append(os.open(tmp, flags, 0o600))

    with made_temp(folder, make, path) as tmp:
        with os.fdopen(opened[0], "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # replaces a link named ``path``, not the file it points to
