"""halfprec.readfile: a regular file, opened without blocking, read with a bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from halfprec.readfile import (
    FileTooLargeError,
    NotAFileError,
    open_regular,
    read_regular,
    read_text_regular,
    refusal,
    special_file_in,
)
from support.special_files import fifo, within, zero_link


def test_a_fifo_is_refused_at_once_naming_what_it_is(tmp_path: Path) -> None:
    pipe = fifo(tmp_path / "pipe")
    with pytest.raises(NotAFileError, match=r"pipe is a FIFO \(named pipe\), not a regular"):
        within(5, lambda: open_regular(pipe), pipe)
    assert refusal("recipe file", pipe) == (
        f"recipe file {pipe} is a FIFO (named pipe), not a regular file; give a file"
    )


def test_a_link_to_dev_zero_is_refused_not_read(tmp_path: Path) -> None:
    link = zero_link(tmp_path / "zero.json")
    with pytest.raises(NotAFileError, match="is a character device"):
        within(5, lambda: read_regular(link, limit=10))


def test_folders_and_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(NotAFileError, match="is a folder"):
        open_regular(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "nope")
    assert refusal("inputs file", tmp_path / "nope") == (
        f"inputs file {tmp_path / 'nope'} not found; check the path"
    )
    assert refusal("inputs file", tmp_path) is not None
    (tmp_path / "f").write_bytes(b"x")
    assert refusal("inputs file", tmp_path / "f") is None


def test_the_read_is_bounded_by_bytes_read_not_by_st_size(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"0123456789")
    assert read_regular(f, limit=10) == b"0123456789"
    with pytest.raises(FileTooLargeError, match="is over 9 bytes"):
        read_regular(f, limit=9)


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    f.write_bytes("\ufeff{}".encode())
    assert read_text_regular(f, limit=100) == "{}"


def test_a_special_file_in_a_folder_is_named(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    assert special_file_in(tmp_path) is None
    fifo(tmp_path / "tokenizer.json")
    found = special_file_in(tmp_path)
    assert found is not None and "tokenizer.json is a FIFO" in found
