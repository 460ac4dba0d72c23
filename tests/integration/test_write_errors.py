"""A write that fails (file-size limit, full disk) is one line naming the user's output,
exit 2, the old output kept and no temp left, for every writer: ``.safetensors``, a
Hugging Face folder, ``.pt2``, ``.ts``, ``.onnx`` and a recipe.

The file-size limit is ``ulimit -f`` (RLIMIT_FSIZE) in a real process; halfprec ignores
SIGXFSZ itself, so the write fails with EFBIG instead of the signal killing it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from support import SRC, SUPPORT

pytestmark = pytest.mark.slow  # real processes under a file-size limit

_WIDE = """
import torch
from torch import nn


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 8)).eval()


def example_inputs() -> list[torch.Tensor]:
    return [torch.randn(4, 128), torch.randn(6, 128)]
"""


def _limited(args: list[str], limit: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``halfprec ARGS`` with files limited to ``limit`` bytes (SIGXFSZ left at its default:
    halfprec must ignore it itself)."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the interpreter's own writes stay under the limit

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "halfprec", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        preexec_fn=limit_files,  # noqa: PLW1509 (no threads run in the parent's test)
        timeout=600,
        check=False,
    )


def _assert_one_line(proc: subprocess.CompletedProcess[str], named: Path) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().count("\n") == 0, proc.stderr[-2000:]
    assert f"cannot use {named}:" in proc.stderr and "ulimit -f" in proc.stderr, proc.stderr
    assert ".halfprec-" not in proc.stderr


def _temps(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".halfprec-")]


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("convert", "half.safetensors"),
        ("export", "m.pt2"),
        ("export", "m.ts"),
        ("export", "m.onnx"),
    ],
)
def test_a_file_size_limit_is_one_line_and_the_old_file_stays(
    command: str, name: str, tmp_path: Path
) -> None:
    if name.endswith(".onnx"):
        pytest.importorskip("onnx")
    (tmp_path / "wide.py").write_text(_WIDE)
    out = tmp_path / name
    out.write_bytes(b"the previous file")
    extra = ["--runs", "0"] if command == "export" else []
    proc = _limited([command, "wide.py:build", "-o", str(out), *extra], 32 * 1024, tmp_path)
    _assert_one_line(proc, out)
    assert out.read_bytes() == b"the previous file" and _temps(tmp_path) == []


def test_a_hugging_face_folder_under_the_limit_names_the_folder(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from support.hf_models import save

    source = save("gpt2", tmp_path / "in")
    out = tmp_path / "out"
    proc = _limited(["convert", str(source), "-o", str(out)], 16 * 1024, tmp_path)
    _assert_one_line(proc, out)
    assert not out.exists() and _temps(tmp_path) == []


def test_a_recipe_under_the_limit_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("{}")
    tiny = f"{SUPPORT / 'export_models.py'}:tiny"
    proc = _limited(["tune", tiny, "-o", str(out)], 64, tmp_path)
    _assert_one_line(proc, out)
    assert out.read_text() == "{}" and _temps(tmp_path) == []
