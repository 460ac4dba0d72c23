"""SIGTERM (what ``timeout``, systemd, Docker and Kubernetes send) mid-write runs the same
clean-up as Ctrl-C: exit 143, one line, the old output kept, no ``.halfprec-*.tmp`` left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import SRC, SUPPORT

pytestmark = pytest.mark.slow  # a real process, killed mid-write


def _temps(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".halfprec-")]


def _terminate_mid_write(args: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    """Run ``halfprec ARGS``, send SIGTERM as soon as a temp file or folder appears in
    ``folder``, and return the finished process."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "halfprec", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 300
    while not _temps(folder):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no write started"
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _assert_terminated(proc: subprocess.CompletedProcess[str], folder: Path) -> None:
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.count("\n") == 1 and "terminated (SIGTERM)" in proc.stderr, proc.stderr
    assert _temps(folder) == []


def test_sigterm_mid_export_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    out = tmp_path / "m.pt2"
    out.write_bytes(b"the previous export")
    proc = _terminate_mid_write(
        ["export", f"{SUPPORT / 'export_models.py'}:tiny", "-o", str(out), "--runs", "0"], tmp_path
    )
    _assert_terminated(proc, tmp_path)
    assert out.read_bytes() == b"the previous export"


def test_sigterm_mid_convert_to_a_folder_leaves_no_folder(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from support.hf_models import save

    source = save("gpt2", tmp_path / "in")
    out = tmp_path / "out"
    proc = _terminate_mid_write(["convert", str(source), "-o", str(out)], tmp_path)
    _assert_terminated(proc, tmp_path)
    assert not out.exists()
