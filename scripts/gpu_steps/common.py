"""What every GPU-check step shares: where it runs, how big, and how it reports.

Each step is a function ``step(ctx) -> list[str]`` (its result lines). It raises
:class:`Skip` for a reason that is no failure (a missing package, one GPU where two are
needed, a torch too old), any other exception for a failure. :func:`run_step` times it
and APPENDS its section to the output file as soon as it ends, so a later step that
times out or crashes leaves every earlier result in place.

``--dry-run``: every step on the CPU at tiny sizes, so CI catches a broken step before a
GPU sees it. A dry run makes no timing claims: :meth:`Context.time` prints no number.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from halfprec.timing import now, synchronize

__all__ = ["MARGIN_S", "ROOT", "Context", "Skip", "StepTimeout", "env_with_src", "need", "run_step"]

ROOT = Path(__file__).resolve().parents[2]


def env_with_src() -> dict[str, str]:
    """This environment with the checkout's ``src`` first on PYTHONPATH, for the tools
    a step starts (pytest, the halfprec CLI, torchrun)."""
    rest = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{rest}"}


class Skip(Exception):
    """A step that cannot run here, for a reason that is not a defect."""


def need(*packages: str) -> None:
    """Skip, naming the first of ``packages`` that is not installed (one line)."""
    for name in packages:
        if importlib.util.find_spec(name) is None:
            raise Skip(f"needs the package {name}, which this machine does not have")


# Seconds a step keeps for itself inside its limit: to write its section and exit before
# gpu-check.sh's ``timeout`` kills it.
MARGIN_S = 4.0
# Seconds a step asked to stop at its deadline has to do so before, with ``hard_stop``, the
# deadline's thread writes its section and ends the process (within MARGIN_S).
GRACE_S = 2.0


@dataclass(frozen=True)
class Context:
    """Where the steps run: ``cuda`` normally, ``cpu`` at tiny sizes in a dry run.
    ``deadline``: the ``time.monotonic()`` by which the step must have written its section
    (its limit from gpu-check.sh, less :data:`MARGIN_S`, counted from the process start);
    None: no limit. ``hard_stop``: a step that has not stopped :data:`GRACE_S` after its
    deadline has its section written for it and the process ends (exit 1); only in the
    step's own process (run.py), never in a caller's (a test)."""

    dry_run: bool
    out: Path
    deadline: float | None = None
    hard_stop: bool = False

    def inner_timeout(self) -> float:
        """The seconds a tool the step starts (pytest, torchrun) may run: what is left
        before the deadline, so that it ends, and the step reports what it printed, before
        the step's own limit kills everything."""
        if self.deadline is None:
            return 600.0
        return max(1.0, self.deadline - time.monotonic() - 1.0)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu" if self.dry_run else "cuda")

    @property
    def half(self) -> str:
        """The half dtype a step trains or compiles in: fp16 on a GPU, bf16 on a CPU
        (whose fp16 kernels are emulated and slow)."""
        return "bf16" if self.dry_run else "fp16"

    def size(self, gpu: int, dry: int) -> int:
        return dry if self.dry_run else gpu

    def sync(self) -> None:
        synchronize(self.device)

    def time(self, seconds: float) -> str:
        """A duration for the report; none in a dry run, which measures nothing."""
        return "n/a (dry run)" if self.dry_run else f"{seconds * 1e3:.3f} ms"


class StepTimeout(BaseException):
    """The step reached its deadline (raised in the step's thread between two Python lines).

    A ``BaseException``, as ``KeyboardInterrupt`` is: it may land inside any ``except
    Exception`` of the step, halfprec or torch, which would report it as some other
    failure and run on past the deadline; only :func:`run_step` catches it."""

    def __str__(self) -> str:
        return "reached its deadline, its limit less the margin to report"


# int PyThreadState_SetAsyncExc(unsigned long id, PyObject *exc), called with the GIL held
# (PYFUNCTYPE). A prototype of its own: the function object ctypes.pythonapi shares with
# every module keeps whatever argtypes another gave it (c_long rejects a c_ulong argument).
_SET_ASYNC_EXC = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)


@contextlib.contextmanager
def _alarm(ctx: Context, stuck: Callable[[int], None]) -> Iterator[None]:
    """Raise :class:`StepTimeout` in the step at ``ctx.deadline``, so that its section is
    written, naming the line it was on, before gpu-check.sh's ``timeout`` kills it (a step
    stuck inside one C call is killed there instead).

    No signal is sent: a timer thread asks CPython to raise the exception in the step's
    thread at its next Python line (``PyThreadState_SetAsyncExc``). A signal (SIGALRM from
    ``setitimer``, or aimed at the thread with ``pthread_kill``) lands on native code of
    torch, OpenMP, oneTBB or a compiler that may not expect it, and a process that blocks
    it keeps it pending past the step; the step's thread reading Python lines is all this
    needs. Library code is not written to be stopped between any two lines (torch.compile's
    wrapper, stopped between setting its frame hook and its ``try``, spins for ever), so
    with ``ctx.hard_stop`` a step still running :data:`GRACE_S` later is given up:
    ``stuck(thread id)`` writes its section and ends the process."""
    if ctx.deadline is None:
        yield
        return
    target = threading.get_ident()
    guard = threading.Lock()
    state = {"running": True}
    ended = threading.Event()

    def fire() -> None:
        with guard:
            if not state["running"]:
                return
            _SET_ASYNC_EXC(target, StepTimeout)
        if ctx.hard_stop and not ended.wait(GRACE_S):
            with guard:  # held to the end: the step cannot report as well
                if state["running"]:
                    stuck(target)

    timer = threading.Timer(max(0.1, ctx.deadline - time.monotonic()), fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with guard:
            state["running"] = False
        ended.set()
        # An exception asked for just as the step ended is raised by the next Python call
        # here, inside run_step's report of the step. It is never withdrawn with NULL: that
        # leaves CPython 3.11's eval breaker set, and a later call under sys.setprofile spins.
        timer.cancel()
        timer.join()


def _call(step: Callable[[Context], list[str]], ctx: Context) -> list[str]:
    """``step(ctx)``, with an import of a package this machine lacks (rich, safetensors,
    ...: where the step or halfprec imports it) turned into :class:`Skip`."""
    try:
        return step(ctx)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if not top or importlib.util.find_spec(top) is not None:
            raise  # a module of an installed package is missing: a defect, not a skip
        raise Skip(f"needs the package {top}, which this machine does not have") from None


def _given_up(ctx: Context, number: int, title: str, start: float, thread: int) -> None:
    """Write the section of a step that did not stop at its deadline, naming the line it
    is on, and end the process (1: failed) without waiting for it."""
    frame = sys._current_frames().get(thread)
    where = "" if frame is None else f" ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})"
    line = f"StepTimeout: {StepTimeout()}, and did not stop within {GRACE_S:g} s{where}"
    _report(ctx, number, title, "FAILED", time.perf_counter() - start, [line])
    os._exit(1)


def _report(
    ctx: Context, number: int, title: str, status: str, took: float, lines: list[str]
) -> None:
    text = [f"\n### {number}. {title}\n", f"- **{status}** after {took:.1f} s"]
    text += [f"- {line}" for line in lines]
    with ctx.out.open("a") as f:
        f.write("\n".join(text) + "\n")
    print("\n".join(text), flush=True)


def run_step(ctx: Context, number: int, title: str, step: Callable[[Context], list[str]]) -> int:
    """Run one step and append its section to ``ctx.out``: 0 ok or skipped, 1 failed."""
    start = now(ctx.device)
    try:
        with _alarm(ctx, lambda thread: _given_up(ctx, number, title, start, thread)):
            lines, status, code = _call(step, ctx), "ok", 0
    except Skip as why:
        lines, status, code = [str(why)], "skipped", 0
    except (Exception, StepTimeout) as exc:  # a step's failure is its result: report, go on
        where = traceback.extract_tb(exc.__traceback__)[-1]
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        lines = [f"{type(exc).__name__}: {first} ({Path(where.filename).name}:{where.lineno})"]
        status, code = "FAILED", 1
    _report(ctx, number, title, status, now(ctx.device) - start, lines)
    return code
