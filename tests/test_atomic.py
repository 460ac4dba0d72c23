"""Atomic writes: old-or-new content, symlinks and modes kept, fsync, stale temp files, folders."""

from __future__ import annotations

import errno
import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

import halfprec.atomic
from halfprec.atomic import (
    atomic_path,
    ensure_folder,
    remove_stale_temp_files,
    temp_dir,
    write_bytes_atomic,
    write_text_atomic,
)
from halfprec.readfile import NotAFileError
from support.interrupts import interrupt_once_made
from support.special_files import fifo, within, zero_link


def _umask() -> int:
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    pytest.skip("cannot read the umask without changing it")


def test_new_file_gets_the_usual_permissions(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()


@pytest.mark.parametrize("mode", [0o755, 0o600, 0o640])
def test_existing_file_keeps_its_mode(tmp_path: Path, mode: int) -> None:
    target = tmp_path / "tool.py"
    target.write_text("old")
    target.chmod(mode)
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == mode


def test_symlink_is_kept_and_its_target_replaced(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "model.bin"
    real.write_bytes(b"old")
    link = tmp_path / "latest.bin"
    link.symlink_to(Path("real") / "model.bin")
    write_bytes_atomic(link, b"new")
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "model.bin")
    assert real.read_bytes() == b"new" and link.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.bin", "real"]


def test_hard_links_are_split_as_documented(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    other = tmp_path / "b.bin"
    os.link(target, other)
    write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new" and other.read_bytes() == b"old"
    assert "hard-linked" in (halfprec.atomic.__doc__ or "")


def test_file_and_folder_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    target = tmp_path / "out.bin"
    write_bytes_atomic(target, b"data")
    assert len(synced) == 2
    assert re.fullmatch(r"\.halfprec-\d+-[0-9a-f]{8}\.tmp", Path(synced[0]).name), synced[0]
    assert synced[1] == str(tmp_path)


def test_failure_keeps_the_old_file_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="boom"), atomic_path(target) as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_directory_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match="is a directory"), atomic_path(tmp_path):
        pass


def test_missing_folders_are_made_as_mkdir_p_makes_them(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "out.bin"
    assert ensure_folder(target) == target  # a check only: it makes nothing
    assert not (tmp_path / "new").exists()
    write_bytes_atomic(target, b"x")
    assert target.read_bytes() == b"x"
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o777 & ~_umask()
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.bin"]


def test_a_failed_write_removes_the_folders_it_made_and_only_those(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    target = tmp_path / "kept" / "new" / "deeper" / "out.bin"
    with pytest.raises(RuntimeError, match="boom"), atomic_path(target) as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"]
    assert list((tmp_path / "kept").iterdir()) == []
    # a folder someone else wrote into meanwhile is not removed
    with pytest.raises(RuntimeError, match="boom"), atomic_path(target):
        (target.parent / "theirs.txt").write_text("")
        raise RuntimeError("boom")
    assert (target.parent / "theirs.txt").is_file()


def test_a_file_as_folder_is_not_a_directory_error(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(NotADirectoryError, match="is not a folder"):
        write_bytes_atomic(tmp_path / "plain" / "out.bin", b"x")


def test_stale_temp_files_of_dead_writers_are_removed(tmp_path: Path) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    stale = tmp_path / f".m.safetensors.halfprec-{proc.pid}-0a1b2c3d.tmp"
    stale.write_bytes(b"partial")
    mine = tmp_path / f".m.safetensors.halfprec-{os.getpid()}-0a1b2c3d.tmp"
    mine.write_bytes(b"in progress")
    old = tmp_path / f".x.halfprec-{os.getpid()}-ffff0000.tmp"
    old.write_bytes(b"ancient")
    os.utime(old, (time.time() - 3 * 86400,) * 2)
    foreign = tmp_path / ".m.safetensors.tmp12345"  # not of halfprec's naming: left alone
    foreign.write_bytes(b"")
    write_bytes_atomic(tmp_path / "m.safetensors", b"new")
    assert not stale.exists() and not old.exists()
    assert mine.exists() and foreign.exists()
    assert remove_stale_temp_files(tmp_path) == []


def test_disk_full_keeps_the_old_file_and_leaves_nothing(tiny_fs: Path) -> None:
    target = tiny_fs / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(OSError) as info:
        write_bytes_atomic(target, b"x" * (1 << 20))
    assert info.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"old"
    assert [p.name for p in tiny_fs.iterdir()] == ["out.bin"]


def test_read_only_file_system_is_an_oserror(tiny_fs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    with pytest.raises(OSError) as info:
        write_bytes_atomic(tiny_fs / "out.bin", b"x")
    assert info.value.errno == errno.EROFS


def test_a_long_file_name_the_file_system_allows_is_written(tmp_path: Path) -> None:
    target = tmp_path / ("m" * 228 + ".safetensors")  # 240 characters: NAME_MAX is 255
    write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_read_only_folder_error_names_the_users_path(tiny_fs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    target = tiny_fs / "m.safetensors"
    with pytest.raises(OSError) as info:
        write_bytes_atomic(target, b"x")
    assert info.value.errno == errno.EROFS and info.value.filename == str(target)
    assert ".tmp" not in str(info.value)


def test_errors_about_the_temp_file_name_the_users_path(tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    with pytest.raises(RuntimeError) as info, atomic_path(target) as tmp:
        raise RuntimeError(f"cannot parse {tmp}: bad magic")
    assert str(info.value) == f"cannot parse {target}: bad magic"


def test_ctrl_c_mid_write_keeps_the_old_file_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as tmp:
        tmp.write_bytes(b"partial")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_a_check_of_the_temp_file_that_fails_keeps_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "model.pt2"
    target.write_bytes(b"previous artifact")
    with pytest.raises(ValueError, match="does not verify"), atomic_path(target) as tmp:
        tmp.write_bytes(b"new artifact")
        raise ValueError(f"{tmp} does not verify")
    assert target.read_bytes() == b"previous artifact"


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_a_temp_folder_carries_the_pid_and_follows_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        with temp_dir(tmp_path, tmp_path / "model") as folder:
            assert re.fullmatch(rf"\.halfprec-{os.getpid()}-[0-9a-f]+\.tmp", folder.name)
            assert folder.is_dir() and list(folder.iterdir()) == []
            assert folder.stat().st_mode & 0o777 == 0o777 & ~umask  # mkdtemp's was 0700 always
            (folder / "model.safetensors").write_bytes(b"partial")
    finally:
        os.umask(old)
    assert list(tmp_path.iterdir()) == []  # what the block left unrenamed is removed


def test_stale_temp_folders_are_removed_like_stale_files(tmp_path: Path) -> None:
    dead = tmp_path / f".halfprec-{_dead_pid()}-0badf00d.tmp"
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"partial")  # what a kill -9 left behind
    alive = tmp_path / f".halfprec-{os.getpid()}-0badf00d.tmp"
    alive.mkdir()
    old_style, young_style = tmp_path / ".halfprec-abc123_x", tmp_path / ".halfprec-zzzzzzzz"
    old_style.mkdir()
    young_style.mkdir()
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(old_style, (day_ago, day_ago))
    link = tmp_path / f".halfprec-{_dead_pid()}-00000000.tmp"
    link.symlink_to(alive)  # a link of that name is not halfprec's: left alone
    with temp_dir(tmp_path, tmp_path / "model") as fresh:  # cleans first, as every write does
        left = {p.name for p in tmp_path.iterdir()}
    assert left == {alive.name, young_style.name, link.name, fresh.name}


def test_a_fifo_or_device_target_is_refused_not_replaced(tmp_path: Path) -> None:
    pipe = fifo(tmp_path / "out.safetensors")
    with pytest.raises(NotAFileError, match=r"out.safetensors is a FIFO \(named pipe\)"):
        within(5, lambda: write_bytes_atomic(pipe, b"x"), pipe)
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode)
    zero = zero_link(tmp_path / "zero.json")
    with pytest.raises(NotAFileError, match="is a character device"):
        write_text_atomic(zero, "{}")
    assert zero.is_symlink() and os.path.realpath(zero) == "/dev/zero"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".halfprec")] == []


@pytest.mark.parametrize("make", ["open", "mkdir"])
def test_an_interrupt_the_moment_a_temp_is_made_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: str
) -> None:
    """Ctrl-C or SIGTERM raises where the program is: also just after the system call that
    made the temp file or folder returned."""
    interrupt_once_made(monkeypatch, make)
    with pytest.raises(KeyboardInterrupt):
        if make == "open":
            write_bytes_atomic(tmp_path / "model.safetensors", b"new")
        else:
            with temp_dir(tmp_path, tmp_path / "model"):
                pytest.fail("the block ran though making its folder was interrupted")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
