"""The test suite's own guards (tests/support): what a worker that dies says about how."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import TESTS


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on ``folder`` with the suite's plugins, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow  # a pytest run with one xdist worker (no torch: a few seconds)
def test_a_crashed_worker_is_reported_with_the_signal_that_ended_it(tmp_path: Path) -> None:
    """xdist alone says "node down: Not properly terminated"; an alarm left armed with
    SIGALRM at its default action ends the worker without a word."""
    (tmp_path / "test_alarm.py").write_text(
        "import signal, time\n\n"
        "def test_ran():\n    pass\n\n"
        "def test_alarm_left_armed():\n"
        "    signal.setitimer(signal.ITIMER_REAL, 0.05)\n"
        "    time.sleep(30)\n"
    )
    done = _pytest(tmp_path, "-p", "support.worker_exit", "-n", "1", "--max-worker-restart=0")
    assert done.returncode == 1, done.stdout[-3000:]
    crashed = "worker 'gw0' crashed while running 'test_alarm.py::test_alarm_left_armed'"
    assert f"{crashed}; its process was killed by SIGALRM (an interval timer" in done.stdout
