"""The compiler's one-time setup, run in the background while a compiled candidate is
built and compiled, and finished before anything is timed.

On CPU, inductor's first compile in a process checks which vector instruction sets the
machine's C++ compiler can build and load (``valid_vec_isa_list``: a test program per
instruction set, each compiled against ATen's vector headers and loaded in a fresh
process). That is several CPU-seconds of ``g++`` that the compile waits for, one core
busy, while the other idles; it is cached on disk only in the inductor cache, so every
cold start pays it. Started in a thread when the first compiled candidate is built, it
runs beside dynamo's tracing and inductor's lowering, which need it only when they
generate code, and it never runs while a call is timed: :meth:`Prewarm.join` waits for it
first. It changes what is compiled in no way: the same check, with the same result, runs
earlier (a compile that reaches it first waits on the check's file lock, then reads the
built file).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

Setup = Callable[[], object]
"""The compiler's one-time setup: called once, its result dropped (it fills the
compiler's own caches)."""


def compiler_setup(device: torch.device) -> Setup | None:
    """The one-time setup of torch.compile's backend on ``device`` that is worth running
    early: inductor's vector-ISA check on CPU; None elsewhere, or where this torch has
    none."""
    if device.type != "cpu":
        return None
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return None
    check = getattr(cpu_vec_isa, "valid_vec_isa_list", None)
    return check if callable(check) else None


class Prewarm:
    """``setup`` run once in a daemon thread (:meth:`start`), and waited for
    (:meth:`join`). A setup that raises is dropped: the compile then runs it itself and
    meets the error where it always did."""

    def __init__(self, setup: Setup | None) -> None:
        self.setup = setup
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start the setup in the background (at most once; nothing without a setup)."""
        if self.setup is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="halfprec-prewarm", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait until a started setup is done (at once when none is running)."""
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        setup = self.setup
        if setup is None:
            return
        try:
            setup()
        except Exception:  # the compile runs it again in the caller's thread and says why
            return
