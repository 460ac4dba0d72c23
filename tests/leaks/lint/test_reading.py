"""lint reads only regular files: a FIFO, a link to /dev/zero, a dangling editor lock link
or a link loop among the files is one HP000 finding each, and the good files are still
linted; a pyproject.toml it cannot read is one LintConfigError, never a crash. Special
files run under a thread guard, so a regression fails instead of hanging."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from halfprec.leaks.lint import LintConfigError, lint_paths
from halfprec.leaks.lint.config import load_config
from halfprec.readfile import NotAFileError
from support.special_files import fifo, within, zero_link

LEAK = """import torch
from torch import nn


class M(nn.Module):
    def forward(self, x):
        return x + torch.zeros(3)
"""


def _tree(tmp_path: Path) -> tuple[Path, list[Path]]:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "good.py").write_text(LEAK)
    pipes = [fifo(root / "x.py")]
    zero_link(root / "zero.py")
    (root / ".#a.py").symlink_to("user@host.1234:1700000000")  # an editor's lock file
    (root / "loop.py").symlink_to("loop.py")
    return root, pipes


def test_each_unreadable_entry_is_one_hp000_and_the_good_files_are_linted(
    tmp_path: Path,
) -> None:
    root, pipes = _tree(tmp_path)
    report = within(20, lambda: lint_paths([root]), *pipes)
    by_file = {Path(r.path).name: [f.code for f in r.findings] for r in report.files}
    assert by_file.pop("good.py") == ["HP101"]  # linted as before
    assert by_file == {name: ["HP000"] for name in ("x.py", "zero.py", ".#a.py", "loop.py")}
    messages = {Path(r.path).name: r.findings[0].message for r in report.files}
    assert "FIFO (named pipe)" in messages["x.py"]
    assert "character device" in messages["zero.py"]


def test_a_fifo_named_directly_is_refused_at_once(tmp_path: Path) -> None:
    made = fifo(tmp_path / "x.py")
    with pytest.raises(NotAFileError, match=r"FIFO \(named pipe\)"):
        within(20, lambda: lint_paths([made]), made)


def test_a_link_loop_named_directly_is_one_error(tmp_path: Path) -> None:
    loop = tmp_path / "loop.py"
    loop.symlink_to("loop.py")
    with pytest.raises(FileNotFoundError, match="symbolic links"):
        lint_paths([loop])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[tool.halfprec.lint]\nselect = ['HP1'] # caf\xe9\n".encode("latin-1"), "UTF-8 TOML"),
        (b"tool = 1\n", "tool must be a table"),
        (b'[tool]\nhalfprec = "x"\n', "tool.halfprec must be a table"),
        (b"[tool.halfprec]\nlint = 3\n", "tool.halfprec.lint must be a table"),
    ],
    ids=["latin-1", "tool-int", "halfprec-str", "lint-int"],
)
def test_a_pyproject_it_cannot_use_is_a_config_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    (tmp_path / "pyproject.toml").write_bytes(content)
    with pytest.raises(LintConfigError, match=message):
        load_config(tmp_path)


def test_a_pyproject_that_is_a_fifo_is_not_read(tmp_path: Path) -> None:
    made = fifo(tmp_path / "pyproject.toml")
    within(20, lambda: load_config(tmp_path), made)  # not a regular file: not a config


def test_the_lint_tree_helpers_leave_no_fd_open(tmp_path: Path) -> None:
    root, pipes = _tree(tmp_path)
    before = len(os.listdir("/proc/self/fd"))
    within(20, lambda: lint_paths([root]), *pipes)
    assert len(os.listdir("/proc/self/fd")) == before
