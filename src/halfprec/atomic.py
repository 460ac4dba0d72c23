"""Atomic file writes: write a temporary file beside the target, fsync it, rename it over.

What a user can expect of every file halfprec writes:

- a crash, an exception, Ctrl-C or ``kill -9`` mid-write leaves the previous file intact
  (or no file), never a partial one; the temporary file is named ``.halfprec-PID-XXXX.tmp``
  (short, whatever the target's name, so a target name the file system allows is never
  refused for its temp name) and the next write into that folder removes those whose
  process is gone;
- errors name the user's path, never the temp file's;
- a caller may check the temp file inside the ``with atomic_path(...)`` block: when the
  check raises, the previous file stays untouched;
- writing to a symlink replaces the file it points to and keeps the link;
- an existing file keeps its permission bits (an executable stays executable, 0600 stays
  0600); a new file gets the usual ``0666 & ~umask``;
- the file and its folder are fsynced before the call returns;
- a hard-linked file is replaced, not rewritten: the target gets a new inode, so other
  names of the old file keep the old content (the price of never exposing a partial file);
- a missing folder is created, with its missing parents (as ``save_pretrained`` and
  ``install -D`` do); a write that fails removes the folders it created, so it leaves
  nothing behind; a path under a regular file is a ``NotADirectoryError``;
- a target that is a FIFO, a device or a socket (or a link to one) is refused, never
  replaced or written into.

A whole folder (a Hugging Face model directory) is written the same way:
:func:`temp_dir` makes ``.halfprec-PID-XXXX.tmp/`` beside the target with the mode
``mkdir`` gives (``0777 & ~umask``, not ``mkdtemp``'s 0700), and the stale-file cleaner
removes such folders of dead processes as it removes the files.

A signal (Ctrl-C, SIGTERM) that lands the moment a temp file or folder has been made still
finds its removal set up: both happen in one frame (:func:`made_temp`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from halfprec.readfile import NotAFileError, special_kind

_STALE_AFTER_S = 24 * 3600  # a temp file this old is removed even if its pid is alive again
# .halfprec-PID-HEX.tmp, and the older .NAME.halfprec-PID-HEX.tmp
_TEMP = re.compile(r"^\.(?:.+\.)?halfprec-(\d+)-[0-9a-f]+\.tmp$")
# the folders tempfile.mkdtemp(prefix=".halfprec-") made before they carried a pid
_OLD_TEMP_DIR = re.compile(r"^\.halfprec-[a-z0-9_]{8}$")


def resolve_target(target: str | os.PathLike[str]) -> Path:
    """The file a write to ``target`` should replace: symlinks followed, folders refused."""
    dest = Path(target)
    real = Path(os.path.realpath(dest)) if dest.is_symlink() else dest
    if real.is_dir():
        raise IsADirectoryError(f"{dest} is a directory; give a file path to write to")
    kind = special_kind(real)
    if kind is not None:  # a FIFO, a device: never replaced by a file
        raise NotAFileError(dest, kind)
    return real


def ensure_folder(target: str | os.PathLike[str]) -> Path:
    """:func:`resolve_target`, after checking that its folder exists or can be made (the
    nearest existing folder above it is a folder); creates nothing, so a caller can check
    a path before slow work."""
    dest = resolve_target(target)
    ensure_parent(dest, target)
    return dest


def ensure_parent(
    dest: str | os.PathLike[str], target: str | os.PathLike[str] | None = None
) -> None:
    """That the folder ``dest`` goes in exists or can be made (the nearest existing folder
    above it is a folder and may be written in), for a file or a folder ``dest``;
    ``target``: the path named in the error (default ``dest``). Creates nothing."""
    named = dest if target is None else target
    folder = Path(dest).parent
    missing = _missing_folders(folder, named)
    nearest = missing[0].parent if missing else folder
    if not os.access(nearest, os.W_OK | os.X_OK):  # root may write anywhere but a read-only fs
        code = errno.EROFS if os.statvfs(nearest).f_flag & os.ST_RDONLY else errno.EACCES
        raise OSError(code, os.strerror(code), str(named))


def _missing_folders(folder: Path, target: str | os.PathLike[str]) -> list[Path]:
    """The folders above ``target`` that do not exist, outermost first; an error when the
    nearest existing one is not a folder."""
    missing: list[Path] = []
    here = folder
    while not here.is_dir():
        if here.exists() or here.is_symlink():  # a file, or a dangling link
            raise NotADirectoryError(
                f"cannot write {target}: {here} is not a folder; give a path inside a folder"
            )
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    return missing[::-1]


@contextlib.contextmanager
def made_folders(folder: Path, target: str | os.PathLike[str]) -> Iterator[None]:
    """Create ``folder`` and its missing parents (as ``mkdir -p`` does) for writing
    ``target`` (named in errors); when the block raises, remove the folders made here
    (those still empty), so a failed write leaves no folder behind."""
    made: list[Path] = []
    try:
        for missing in _missing_folders(folder, target):
            try:
                os.mkdir(missing, 0o777)  # the kernel applies the umask, as for any new folder
            except FileExistsError:  # made meanwhile by another writer: not ours to remove
                continue
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(target)) from exc
            made.append(missing)
        yield
    except BaseException:
        for new in reversed(made):
            with contextlib.suppress(OSError):  # not empty: someone else wrote into it
                new.rmdir()
        raise


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success move it onto ``target``.

    Write the whole file to the yielded path (by name, so any library can write it). See
    the module docs for missing folders, symlinks, permissions, fsync and hard links.
    """
    dest = resolve_target(target)
    with made_folders(dest.parent, target), _replacing(target, dest) as tmp:
        yield tmp


@contextlib.contextmanager
def _replacing(target: str | os.PathLike[str], dest: Path) -> Iterator[Path]:
    """:func:`atomic_path` once ``dest``'s folder exists."""
    remove_stale_temp_files(dest.parent)
    with made_temp(dest.parent, _new_file, target) as tmp:
        try:
            yield tmp
            _finish(tmp, dest)
        except OSError as exc:
            if exc.errno is None or exc.filename not in (None, str(tmp)):
                _name_for_user(exc, tmp, target)
                raise
            raise OSError(exc.errno, exc.strerror, str(target)) from exc  # the user's path
        except Exception as exc:
            mapped = as_write_error(exc, target)  # a library's own text for a full disk
            if mapped is not None:
                raise mapped from exc
            _name_for_user(exc, tmp, target)
            raise


def _name_for_user(exc: BaseException, tmp: Path, target: str | os.PathLike[str]) -> None:
    """Replace the temp file's path in ``exc``'s message by ``target``, in place."""
    if exc.args and isinstance(exc.args[0], str):
        text = exc.args[0].replace(str(tmp), str(target)).replace(tmp.name, Path(target).name)
        exc.args = (text, *exc.args[1:])


def write_bytes_atomic(target: str | os.PathLike[str], data: bytes | memoryview) -> None:
    """Write ``data`` to ``target`` atomically."""
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_text_atomic(target: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8, newlines as given) to ``target`` atomically."""
    write_bytes_atomic(target, text.encode("utf-8"))


def remove_stale_temp_files(folder: Path) -> list[Path]:
    """Remove halfprec temp files and folders in ``folder`` whose writer is gone, or that
    are over a day old; return what was removed."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        m = _TEMP.match(entry.name)
        is_dir = entry.is_dir(follow_symlinks=False)
        if m is None and not (is_dir and _OLD_TEMP_DIR.match(entry.name)):
            continue
        if not (is_dir or entry.is_file(follow_symlinks=False)):
            continue  # a link or a special file of that name is not ours
        with contextlib.suppress(OSError):
            old = now - entry.stat(follow_symlinks=False).st_mtime > _STALE_AFTER_S
            if old or (m is not None and not _alive(int(m.group(1)))):
                if is_dir:
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def temp_dir(parent: str | os.PathLike[str], target: str | os.PathLike[str]) -> Iterator[Path]:
    """A new empty folder ``.halfprec-PID-XXXX.tmp`` in ``parent`` for writing ``target``
    (named in errors), made as ``mkdir`` makes one (``0777 & ~umask``), after removing the
    stale ones of dead processes. Fill it, then ``os.replace`` it onto the target; whatever
    is left of it when the block ends (an exception, Ctrl-C, SIGTERM) is removed."""
    remove_stale_temp_files(Path(parent))
    with made_temp(Path(parent), _new_folder, target) as tmp:
        yield tmp


def _new_file(path: Path) -> None:
    # 0o666: the kernel applies the umask, as for any new file
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def _new_folder(path: Path) -> None:
    os.mkdir(path, 0o777)  # the kernel applies the umask, as for any new folder


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def made_temp(
    folder: Path, make: Callable[[Path], None], target: str | os.PathLike[str]
) -> Iterator[Path]:
    """A temp path in ``folder`` that ``make`` creates exclusively, removed when the block
    ends. Creation and removal share this frame: an exception raised by a signal's handler
    the moment ``make`` returns lands in one of the two handlers, never between them."""
    while True:
        tmp = folder / f".halfprec-{os.getpid()}-{secrets.token_hex(4)}.tmp"
        try:
            make(tmp)
        except FileExistsError:
            continue
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(target)) from exc  # the user's path
        except BaseException:
            _remove(tmp)
            raise
        break
    try:
        yield tmp
    finally:
        _remove(tmp)


# the errors of a write that ran out of room or may not write: the user's to fix (exit 2)
_WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES)
# how Rust's std::io (safetensors) and C++ writers put an errno in their messages
_ERRNO_IN_TEXT = re.compile(r"(?:os error|code:?)\s*(\d+)", re.IGNORECASE)


def as_write_error(exc: BaseException, target: str | os.PathLike[str]) -> OSError | None:
    """``exc``, raised while writing ``target`` (into a temp file or folder), as the
    ``OSError`` naming ``target`` that it stands for: a full disk, a file-size limit, a
    quota, a read-only file system or a permission, also where a library reports it in
    its own exception's text (safetensors' ``SafetensorError``); ``None`` for any other."""
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None:
        m = _ERRNO_IN_TEXT.search(str(exc))
        code = int(m.group(1)) if m else None
    if code not in _WRITE_ERRNOS:
        return None
    return OSError(code, os.strerror(code), str(target))


def new_file_mode() -> int:
    """The mode a new file gets here: ``0o666 & ~umask`` (read without changing it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = os.umask(0o022)  # no /proc: read it by setting it, and put it back at once
        os.umask(umask)
    return 0o666 & ~umask


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _finish(tmp: Path, dest: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.chmod(tmp, dest.stat().st_mode & 0o7777)  # keep the replaced file's mode
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, dest)
    _fsync_folder(dest.parent)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # some platforms cannot open a folder; the rename itself is still atomic
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
