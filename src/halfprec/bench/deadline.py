"""Stopping a call that runs past its seconds: how a compile that runs long is abandoned.

torch offers no way to interrupt a compile from another thread, but a compile runs on the
calling thread, mostly in Python (dynamo's trace, inductor's lowering), and waits on its
C++ builds in ways a signal interrupts. So on the main thread of a POSIX process,
:func:`deadline` arms a one-shot timer that sends ``SIGALRM`` to the main thread alone,
whose handler raises :class:`Overrun`
in the call, as Ctrl-C raises ``KeyboardInterrupt``: the compile is abandoned where it is,
its half-built module is dropped by the caller, and the process goes on. The handler and
timer that were there before are restored on the way out; where the caller has a timer or
a ``SIGALRM`` handler of its own, or off the main thread, nothing is armed (the block
runs to its end, as before).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType


class Overrun(BaseException):  # noqa: N818 - named like KeyboardInterrupt, raised the same way
    """Raised inside a block that ran past its deadline's ``seconds`` (a ``BaseException``,
    like ``KeyboardInterrupt``, so that no ``except Exception`` on the way swallows it)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"stopped after {seconds:.1f} s")
        self.seconds = seconds


def can_stop() -> bool:
    """Whether :func:`deadline` can stop a block here: the main thread of a process with
    ``signal.setitimer``, no real-time timer armed and no ``SIGALRM`` handler of the
    caller's."""
    if (
        not hasattr(signal, "setitimer")
        or not hasattr(signal, "pthread_kill")
        or threading.current_thread() is not threading.main_thread()
    ):
        return False
    if signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
        return False
    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[bool]:
    """Within the block, raise :class:`Overrun` once ``seconds`` of wall time have passed
    (at once where ``seconds`` <= 0); yields whether it is armed (False with ``seconds``
    None or where :func:`can_stop` is False: the block then runs to its end)."""
    if seconds is None or not can_stop():
        yield False
        return
    if seconds <= 0:
        raise Overrun(0.0)
    start = time.perf_counter()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise Overrun(time.perf_counter() - start)

    previous = signal.signal(signal.SIGALRM, stop)
    # A timer thread sends SIGALRM to the main thread alone: setitimer's alarm goes to the
    # process, and the kernel may hand it to any thread that does not block it, such as a
    # runtime's or a compiler's worker thread that never expects it.
    main = threading.get_ident()  # can_stop(): this is the main thread
    alarm = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGALRM))
    alarm.daemon = True
    try:
        alarm.start()
        yield True
    finally:
        try:
            alarm.cancel()
            alarm.join()
        finally:
            signal.signal(signal.SIGALRM, previous)
