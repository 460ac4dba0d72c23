"""SIGTERM (what ``timeout``, systemd, Docker and Kubernetes send) mid-write runs the same
clean-up as Ctrl-C: exit 143, one line, the old output kept, no ``.halfprec-*.tmp`` left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support import SRC, SUPPORT

pytestmark = pytest.mark.slow  # a real process, killed mid-write


def _temps(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".halfprec-")]


def _terminate_mid_write(
    args: list[str], folder: Path, point: str
) -> subprocess.CompletedProcess[str]:
    """Run ``halfprec ARGS`` with its first write held at ``point`` (``created``: its temp
    file or folder just made; ``renaming``: about to be renamed onto the target; see
    ``support/held_write.py``), send SIGTERM there, and return the finished process."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    held_write = [str(SUPPORT / "held_write.py"), point, str(folder), str(ready_w), str(go_r)]
    with subprocess.Popen(
        [sys.executable, *held_write, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        pass_fds=(ready_w, go_r),
    ) as proc:
        os.close(ready_w)
        os.close(go_r)
        with os.fdopen(ready_r) as ready:
            held = ready.readline()  # "" only if the process ended without writing
        if not held:
            os.close(go_w)
            out, err = proc.communicate(timeout=600)
            pytest.fail(f"no write was held at {point!r}: exit {proc.returncode}\n{err}")
        assert Path(held.strip()).name in _temps(folder), held
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=600)
        os.close(go_w)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _assert_terminated(proc: subprocess.CompletedProcess[str], folder: Path) -> None:
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.count("\n") == 1 and "terminated (SIGTERM)" in proc.stderr, proc.stderr
    assert _temps(folder) == []


WRITE_POINTS = ["created", "renaming"]


@pytest.mark.parametrize("point", WRITE_POINTS)
def test_sigterm_mid_export_leaves_the_old_file_and_no_temp(tmp_path: Path, point: str) -> None:
    out = tmp_path / "m.pt2"
    out.write_bytes(b"the previous export")
    model = f"{SUPPORT / 'export_models.py'}:tiny"
    proc = _terminate_mid_write(["export", model, "-o", str(out), "--runs", "0"], tmp_path, point)
    _assert_terminated(proc, tmp_path)
    assert out.read_bytes() == b"the previous export"


@pytest.mark.parametrize("point", WRITE_POINTS)
def test_sigterm_mid_convert_to_a_folder_leaves_no_folder(tmp_path: Path, point: str) -> None:
    pytest.importorskip("transformers")
    from support.hf_models import save

    source = save("gpt2", tmp_path / "in")
    out = tmp_path / "out"
    proc = _terminate_mid_write(["convert", str(source), "-o", str(out)], tmp_path, point)
    _assert_terminated(proc, tmp_path)
    assert not out.exists()
