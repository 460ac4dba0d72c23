"""Every ``--inputs`` file halfprec cannot read is one line, exit 2, naming the path as the
user typed it, what the file is, and the fix (issue 39: .pkl/.json/.zip/.txt named only
the file's name; a text file named .pt was an internal error)."""

from __future__ import annotations

import json
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from support import FIXTURES
from support.cli import run_cli

SPEC = f"{FIXTURES / 'user_model.py'}:build"


def _truncated(path: Path) -> None:
    save_file({"x": torch.randn(8, 8)}, str(path))
    path.write_bytes(path.read_bytes()[:-100])


# file name -> how to write it, and what the refusal says it is
KINDS: dict[str, tuple[Callable[[Path], object], str]] = {
    "x.pkl": (lambda p: p.write_bytes(pickle.dumps({"x": [1, 2]})), "is a pickle"),
    "x.json": (lambda p: p.write_text(json.dumps({"x": [[1.0]]})), "is JSON text"),
    "x.zip": (lambda p: zipfile.ZipFile(p, "w").close(), "is a zip archive"),
    "x.txt": (lambda p: p.write_text("hello world\n"), "is text"),
    "x.parquet": (lambda p: p.write_bytes(b"PAR1"), "is a .parquet file"),
    "x": (lambda p: torch.save({"x": torch.ones(1)}, p), "is without a suffix"),
    "folder.pt": (lambda p: p.mkdir(), "is a folder"),
    "empty.pt": (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    "empty.safetensors": (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    "text.pt": (lambda p: p.write_text("101 102 103\n"), "is corrupt or not a torch file"),
    "cut.safetensors": (_truncated, "is not a valid safetensors file"),
    "objects.npz": (
        lambda p: np.savez(p, a=np.array([{"x": 1}], dtype=object)),
        "is a NumPy archive",
    ),
    "numpy.pt": (lambda p: torch.save({"x": np.zeros(3)}, p), "refusing to unpickle inputs file"),
}


@pytest.mark.parametrize("name", KINDS)
def test_an_unreadable_inputs_file_is_one_line_naming_the_path_as_given(
    tmp_path: Path, name: str
) -> None:
    make, what = KINDS[name]
    (tmp_path / "data").mkdir()
    (tmp_path / "sub").mkdir()
    make(tmp_path / "data" / name)
    given = f"sub/../data/{name}"  # as typed, folders and all
    proc = run_cli("check", SPEC, "--inputs", given, "--runs", "0", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("halfprec: error: "), line
    assert f"{given} " in line or f"{given}:" in line, line
    assert what in line, line
    assert "give a .safetensors file with one tensor per input name" in line, line
