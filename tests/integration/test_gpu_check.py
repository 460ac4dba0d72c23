"""scripts/gpu-check.sh --dry-run: every step's Python runs on the CPU at tiny sizes and
reports a result, so a broken GPU check shows here before a GPU ever sees it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = 9


@pytest.mark.slow  # nine interpreters, a compile, two exports, torchrun: ~1 min of CPU
def test_the_dry_run_reports_every_step_in_order(tmp_path: Path) -> None:
    out = tmp_path / "gpu.md"
    page = ROOT / "docs" / "gpu.md"
    before = page.read_text()
    env = {**os.environ, "GPU_CHECK_OUT": str(out)}
    done = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--dry-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 2: it could not start at all
    assert f"results in {out}" in done.stdout
    text = out.read_text()
    assert "dry run on the CPU at tiny sizes: no measurement" in text
    sections = re.findall(r"^### (\d+)\. .*\n\n- \*\*(ok|skipped|FAILED)\*\* after", text, re.M)
    assert [int(n) for n, _ in sections] == list(range(1, STEPS + 1)), text
    assert "timed out" not in text and "crashed" not in text, text
    # a dry run makes no timing claims
    assert not re.search(r"\d ms\b", text), text
    assert page.read_text() == before  # a dry run leaves the page alone


# Steps 1 and 8 start pytest and torchrun in processes of their own, which see every package.
_IN_PROCESS = ("compile", "bench", "gemm", "scaler", "stochastic", "export", "tf32")


@pytest.mark.slow  # an interpreter that imports torch
def test_a_step_whose_package_is_missing_reports_skipped(tmp_path: Path) -> None:
    """A machine without rich or safetensors (halfprec's own dependencies, which a GPU box's
    python3 may lack): each step says which package it needs and is "skipped", and the
    script goes on; none crashes at import."""
    out = tmp_path / "gpu.md"
    script = (
        "import sys\n"
        "sys.modules['rich'] = sys.modules['safetensors'] = None  # as if not installed\n"
        "sys.path.insert(0, 'scripts/gpu_steps')\n"
        "from pathlib import Path\n"
        "from run import STEPS, Context, run_step\n"
        f"ctx = Context(dry_run=True, out=Path({str(out)!r}))\n"
        f"codes = [run_step(ctx, *STEPS[name]) for name in {_IN_PROCESS!r}]\n"
        "sys.exit(max(codes))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    sections = re.findall(r"^### (\d+)\. .*\n\n- \*\*(\w+)\*\* after .*\n- (.*)$", text, re.M)
    assert len(sections) == len(_IN_PROCESS), text
    for _, status, why in sections:
        assert status == "skipped", text
        assert re.fullmatch(r"needs the package (rich|safetensors), which this machine .*", why)
