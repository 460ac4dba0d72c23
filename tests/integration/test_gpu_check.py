"""scripts/gpu-check.sh --dry-run: every step's Python runs on the CPU at tiny sizes and
reports a result, so a broken GPU check shows here before a GPU ever sees it."""

from __future__ import annotations

import os
import re
import subprocess
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
