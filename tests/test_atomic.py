from __future__ import annotations

import os
from pathlib import Path

import pytest

from halfprec.atomic import atomic_path, write_text_atomic


def test_write_replaces_with_usual_permissions(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


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
