"""A crashed pytest-xdist worker is reported with how its process ended.

A pytest plugin (loaded by tests/conftest.py). pytest-xdist says only "node down: Not
properly terminated" and "worker 'gwN' crashed while running TEST" when a worker's
connection closes; whether a signal killed it (which one) or it exited is what tells the
causes apart, so the crash report ends with the worker's exit status.
"""

from __future__ import annotations

import signal
import subprocess
from typing import Any

import pytest

# seconds to wait for the worker's process once its connection has closed: execnet ends a
# worker whose connection broke within 15 s (an interrupt, then os._exit)
WAIT_S = 20.0

# what each signal that ends a worker without a word usually means
_WHY = {
    signal.SIGKILL: "kill -9, or the kernel's OOM killer (see dmesg)",
    signal.SIGALRM: "an interval timer (signal.setitimer or alarm) that fired while "
    "SIGALRM was at its default action",
    signal.SIGTERM: "another process sent it SIGTERM",
    signal.SIGPIPE: "a write to a closed pipe, with SIGPIPE at its default action",
    signal.SIGXFSZ: "a write past RLIMIT_FSIZE, with SIGXFSZ at its default action",
}


def how_it_ended(returncode: int | None) -> str:
    """``returncode`` (``Popen.returncode``) in words."""
    if returncode is None:
        return f"its process was still running {WAIT_S:.0f} s after its connection closed"
    if returncode < 0:
        sig = signal.Signals(-returncode)
        why = _WHY.get(sig)
        return f"its process was killed by {sig.name}" + (f" ({why})" if why else "")
    return f"its process exited with status {returncode} (os._exit, or exit() in native code)"


def _worker_process(report: pytest.TestReport) -> subprocess.Popen[bytes] | None:
    """The crashed worker's process: xdist puts the worker on the report, execnet keeps
    the Popen of a ``popen`` gateway on its IO."""
    gateway: Any = getattr(getattr(report, "node", None), "gateway", None)
    popen = getattr(getattr(gateway, "_io", None), "popen", None)
    return popen if isinstance(popen, subprocess.Popen) else None


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: object) -> None:
    popen = _worker_process(report)
    if popen is None:
        return
    try:
        returncode: int | None = popen.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        returncode = None
    report.longrepr = f"{report.longrepr}; {how_it_ended(returncode)}"
