"""A crashed pytest-xdist worker is reported with how its process ended, and what
faulthandler wrote as it died.

A pytest plugin (loaded by tests/conftest.py). pytest-xdist says only "node down: Not
properly terminated" and "worker 'gwN' crashed while running TEST" when a worker's
connection closes; whether a signal killed it (which one) or it exited is what tells the
causes apart, so the crash report ends with the worker's exit status. A worker's
faulthandler (every thread's Python stack on SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL)
writes to a file of its own, which the report quotes: on the worker's stderr the dump is
apart from the test it explains, and lost wherever a log keeps stdout alone.
"""

from __future__ import annotations

import faulthandler
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Any

import pytest

_DUMP = pytest.StashKey[IO[str]]()

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


def dump_path(workerinput: dict[str, Any]) -> Path:
    """The file a worker's faulthandler writes to, by test run and worker."""
    name = f"pytest-{workerinput['testrunuid']}-{workerinput['workerid']}.faulthandler"
    return Path(tempfile.gettempdir()) / name


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler plugin chose stderr
def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:  # not an xdist worker: faulthandler stays on stderr
        return
    dump = dump_path(workerinput).open("w")
    config.stash[_DUMP] = dump
    faulthandler.enable(file=dump, all_threads=True)


@pytest.hookimpl(tryfirst=True)  # before pytest's own faulthandler plugin disables it
def pytest_unconfigure(config: pytest.Config) -> None:
    dump = config.stash.get(_DUMP, None)
    if dump is None:
        return
    faulthandler.disable()
    dump.close()
    Path(dump.name).unlink(missing_ok=True)
    del config.stash[_DUMP]


def _dump_of(report: pytest.TestReport) -> str:
    """What the crashed worker's faulthandler wrote (the file is removed), else ""."""
    workerinput = getattr(getattr(report, "node", None), "workerinput", None)
    if not isinstance(workerinput, dict):
        return ""
    where = dump_path(workerinput)
    try:
        text = where.read_text(errors="replace")
    except OSError:
        return ""
    where.unlink(missing_ok=True)
    return text.strip()


def _worker_process(report: pytest.TestReport) -> subprocess.Popen[bytes] | None:
    """The crashed worker's process: xdist puts the worker on the report, execnet keeps
    the Popen of a ``popen`` gateway on its IO."""
    gateway: Any = getattr(getattr(report, "node", None), "gateway", None)
    popen = getattr(getattr(gateway, "_io", None), "popen", None)
    return popen if isinstance(popen, subprocess.Popen) else None


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: object) -> None:
    popen = _worker_process(report)
    if popen is not None:
        try:
            returncode: int | None = popen.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            returncode = None
        report.longrepr = f"{report.longrepr}; {how_it_ended(returncode)}"
    dump = _dump_of(report)  # read once the process has ended: the dump is complete
    if dump:
        report.longrepr = f"{report.longrepr}\nfaulthandler in the worker:\n{dump}"
