"""A test that leaves process-wide state changed fails, naming what it changed.

A pytest plugin (loaded by tests/conftest.py). Two tests share a pytest-xdist worker, so
what one leaves behind (a signal handler, an armed interval timer, the working folder, the
umask, an environment variable, ``sys.path``, the root logger, a resource limit, torch's
thread count, default dtype, grad mode or matmul precision) reaches whichever tests run
after it there: a failure that depends on the order and the worker, or a worker killed
later by a timer at its default action. Each test is compared before and after (after its
fixtures, monkeypatch's undo included, have run); restore such state in a fixture, or keep
the library from changing it.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest

# set by libraries on first use, for the whole process, whichever test that is
LIBRARY_ENVIRON = {
    "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR": "torch.compile (inductor)",
    "TORCHINDUCTOR_CACHE_DIR": "torch.compile (inductor)",
    "TRITON_CACHE_DIR": "torch.compile (inductor)",
    "TORCH_WARM_POOL": "torch.compile (inductor)",
    "KMP_DUPLICATE_LIB_OK": "scikit-learn's import",
    "KMP_INIT_AT_FORK": "scikit-learn's import",
    "PYTEST_CURRENT_TEST": "pytest itself",
}
# folders a library puts on sys.path when it is first imported
LIBRARY_PATHS = (os.path.join("setuptools", "_vendor"),)  # setuptools (torch's cpp_extension)
_LIMITS = ("RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_CORE")
_TIMERS = {n: getattr(signal, n) for n in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")}


def _signals() -> dict[str, object]:
    handlers = {}
    for sig in signal.valid_signals():
        try:
            handlers[f"signal {signal.Signals(sig).name}"] = signal.getsignal(sig)
        except (ValueError, OSError):  # not a named signal (real-time ones), or not settable
            continue
    for name, which in _TIMERS.items():
        left, interval = signal.getitimer(which)
        handlers[f"timer {name}"] = "armed" if left or interval else "off"
    return handlers


def _umask() -> str | None:
    """The umask, read without setting it (Linux), else None (not compared)."""
    try:
        with open("/proc/self/status") as status:
            return next((line.split()[1] for line in status if line.startswith("Umask:")), None)
    except OSError:
        return None


def _root_logger() -> dict[str, object]:
    """The root logger's level, filters and handlers, less pytest's own capture handlers
    (added and removed around each phase)."""
    root = logging.getLogger()
    mine = [h for h in root.handlers if not type(h).__module__.startswith("_pytest")]
    return {"root logger level": root.level, "root logger filters": list(root.filters),
            "root logger handlers": mine}  # fmt: skip


def _torch() -> dict[str, object]:
    torch: Any = sys.modules.get("torch")
    if torch is None:  # not imported yet: nothing of it to change
        return {}
    return {
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.is_inference_mode_enabled()": torch.is_inference_mode_enabled(),
        "torch.is_autocast_enabled('cpu')": torch.is_autocast_enabled("cpu"),
        "torch.are_deterministic_algorithms_enabled()": (
            torch.are_deterministic_algorithms_enabled()
        ),
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.backends.mkldnn.matmul.fp32_precision": (
            torch.backends.mkldnn.matmul.fp32_precision
        ),
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled(),
    }


def snapshot() -> dict[str, object]:
    """The process-wide state a test must leave as it found it, by name."""
    environ = {k: v for k, v in os.environ.items() if k not in LIBRARY_ENVIRON}
    return {
        **_signals(),
        "working folder": os.getcwd(),
        "umask": _umask(),
        **{f"environment {k}": v for k, v in environ.items()},
        "sys.path": [p for p in sys.path if not p.endswith(LIBRARY_PATHS)],
        **{f"resource.{n}": resource.getrlimit(getattr(resource, n)) for n in _LIMITS},
        **_root_logger(),
        **_torch(),
    }


def changes(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """What differs, one phrase each ("name: before -> after"). An environment variable
    may be set or unset; any other name that appears (torch, imported by the test) is new
    state, not a change."""
    unset = "(unset)"
    names = sorted(set(before) | {n for n in after if n.startswith("environment ")})
    differ = [n for n in names if before.get(n, unset) != after.get(n, before.get(n, unset))]
    differ += [n for n in before if n.startswith("environment ") and n not in after]
    return [_change(n, before.get(n, unset), after.get(n, unset)) for n in differ]


def _change(name: str, before: object, after: object) -> str:
    if isinstance(before, list) and isinstance(after, list):  # sys.path: what moved
        gone = [p for p in before if p not in after]
        new = [p for p in after if p not in before]
        return f"{name}: added {new}, removed {gone}" if new or gone else f"{name}: reordered"
    return f"{name}: {before!r} -> {after!r}"


@pytest.fixture(autouse=True)
def _process_state_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    before = snapshot()
    yield
    changed = changes(before, snapshot())
    if changed:
        pytest.fail(
            f"{request.node.nodeid} left process-wide state changed, which reaches every "
            f"later test in this worker: {'; '.join(changed)[:2000]} (restore it in a "
            "fixture or with monkeypatch, or keep the library from changing it)",
            pytrace=False,
        )
