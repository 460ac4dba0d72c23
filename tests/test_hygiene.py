"""The test suite's own guards (tests/support): what a worker that dies says about how."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import TESTS


def _pytest(
    folder: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """pytest on ``folder`` with the suite's plugins, in a process of its own (``env``:
    variables to set)."""
    env = {**os.environ, "PYTHONPATH": str(TESTS), **(env or {})}
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


@pytest.mark.slow  # a pytest run with one xdist worker (no torch: a few seconds)
def test_a_crashed_worker_report_quotes_its_faulthandler_dump_and_leaves_no_file(
    tmp_path: Path,
) -> None:
    """A segfault in a worker: the report itself (stdout, beside the test's name) holds
    every thread's Python stack down to the line that crashed, not the worker's stderr
    alone, which a log of stdout loses."""
    (tmp_path / "test_segv.py").write_text(
        "import ctypes\n\n"
        "def test_ran():\n    pass\n\n"
        "def _reads_address_zero():\n"
        "    ctypes.string_at(0)\n\n"
        "def test_segfault():\n"
        "    _reads_address_zero()\n"
    )
    temp = tmp_path / "temp"
    temp.mkdir()
    done = _pytest(
        tmp_path, "-p", "support.worker_exit", "-n", "1", "--max-worker-restart=0",
        env={"TMPDIR": str(temp)},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:]
    report = done.stdout[done.stdout.index("crashed while running 'test_segv.py::test_segf") :]
    assert "its process was killed by SIGSEGV\nfaulthandler in the worker:\n" in report
    assert "Fatal Python error: Segmentation fault" in report
    assert re.search(r'File ".*test_segv.py", line 7 in _reads_address_zero', report), report
    assert list(temp.rglob("*.faulthandler")) == []  # the dump file is read and removed


def test_no_property_test_has_a_wall_clock_deadline() -> None:
    """hypothesis fails an example slower than its deadline (200 ms by default), and calls
    the test "Flaky" when the example is fast again: a timed test, which a loaded machine
    fails. Every profile the suite runs under has none."""
    from hypothesis import settings

    assert settings.default.deadline is None


def test_the_state_guard_names_a_handler_a_timer_a_variable_and_a_folder_left_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from support.state_guard import changes, snapshot

    before = snapshot()
    old = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        monkeypatch.setenv("HALFPREC_GUARD_PROBE", "1")
        monkeypatch.chdir(tmp_path)
        found = changes(before, snapshot())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    named = {c.split(":")[0] for c in found}
    assert named == {
        "signal SIGALRM",
        "timer ITIMER_REAL",
        "environment HALFPREC_GUARD_PROBE",
        "working folder",
    }, found
    assert "environment HALFPREC_GUARD_PROBE: '(unset)' -> '1'" in found


@pytest.mark.slow  # a pytest run in a process of its own (no torch: about a second)
def test_a_test_that_leaves_state_changed_fails_and_one_that_restores_it_passes(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_leaks.py").write_text(
        "import os, signal\n\n"
        "def test_alarm_left_armed():\n"
        "    signal.signal(signal.SIGALRM, lambda *_: None)\n"
        "    signal.setitimer(signal.ITIMER_REAL, 600)\n\n"
        "def test_variable_left_set():\n"
        "    os.environ['HALFPREC_GUARD_PROBE'] = '1'\n\n"
        "def test_restored(monkeypatch):\n"
        "    monkeypatch.setenv('HALFPREC_GUARD_PROBE', '2')\n"
        "    monkeypatch.chdir('/')\n"
    )
    done = _pytest(tmp_path, "-p", "support.state_guard", "-p", "no:xdist", "-rE")
    assert "3 passed, 2 errors" in done.stdout, done.stdout[-3000:]  # errors at teardown
    alarm = re.search(r"test_alarm_left_armed left process-wide state changed, .*", done.stdout)
    assert alarm is not None, done.stdout[-3000:]
    assert "signal SIGALRM: <Handlers.SIG_DFL: 0> -> <function" in alarm.group(0)
    assert "timer ITIMER_REAL: 'off' -> 'armed'" in alarm.group(0)
    assert "ERROR test_leaks.py::test_variable_left_set - " in done.stdout
    assert "environment HALFPREC_GUARD_PROBE: '(unset)' -> '1'" in done.stdout
