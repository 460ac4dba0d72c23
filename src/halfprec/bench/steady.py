"""One timed sample of a variant in a steady phase of its own: wait until no thread of this
process is still busy, warm the variant up again, then time a block of back-to-back calls.

Why: a runtime's worker threads (OpenVINO's, onnxruntime's, OpenMP's) keep spinning for a
while after a call returns. Timed one call each, alternating, the call timed next shares
the cores with those spinning threads: a runtime that leaves threads spinning slows the fp32
call timed after it, so fp32 looks slow and the runtime's ratio inflates, on a model small
enough that the spinning outlasts fp32's call. Here each sample starts only once this
process's threads have been idle for a few milliseconds (its CPU time, all threads
together, barely grows: :func:`settle`), and it is the mean of a block of calls of one
variant (:func:`steady_call_time`), so a variant's after-effects land on its own next calls,
as they do when a user calls it in a loop, and never on another variant's.

The first calls after that wait and the switch from another variant are cold: the other
variant's data fills the caches and this one's worker threads have gone to sleep. A user's
loop pays that once; a sample that is one such call pays it every round, and pays most for
a variant whose weights fit the last-level cache when fp32's do not (OpenVINO's bf16 MiniLM
beside fp32's, twice the bytes), so its speedup is under-claimed. So the calls of the first
:data:`WARM_S` are left out, and only a call of :data:`LONG_S` or more, whose cold start is
a few percent of it, is a sample on its own. Other processes' load is not waited for:
pairing the rounds handles that.

A long call right after the wait is not always what a loop's calls cost either: eager fp32
on DeiT-small (two threads) took 6% less on its first call after the wait than on the next
one or in a loop, while the half choice's barely differed, so one-call samples read the
speedup that much low. With ``second`` (deploy's end moment, where its pair is short enough
to afford it: :func:`halfprec.bench.claim.second_call`) that call is left untimed and the
next one is the sample.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

from halfprec.timing import Stopwatch

BLOCK_S = 0.02
"""The shortest block of back-to-back calls timed as one sample (a slower call is one)."""
WARM_S = 0.005
"""Untimed calls after the wait, at least one and for at least this long: the cold ones."""
LONG_S = 0.1
"""A call this long is a sample on its own, right after the wait: refilling the caches
(tens of MB at tens of GB/s) and waking threads cost about a millisecond of it."""
QUIET = 0.1
"""A process is quiet while its threads use under this share of one core's time."""
SETTLE_MAX_S = 0.25
"""The longest wait for quiet; a process busy for longer is timed as it is."""
_WINDOW_S = 0.001
_QUIET_WINDOWS = 3  # in a row: a loaded machine may run a spinning thread a window late
_MAX_CALLS = 10_000


def settle(
    *,
    max_s: float = SETTLE_MAX_S,
    cpu: Callable[[], float] = time.process_time,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Sleep in 1 ms windows until this process's threads (all of them: a runtime's, the
    interpreter's) used under :data:`QUIET` of a core in each of the last three windows,
    or ``max_s`` passed; returns the seconds waited. ``cpu``/``clock``/``sleep`` are
    injectable."""
    start, quiet = clock(), 0
    while quiet < _QUIET_WINDOWS and clock() - start < max_s:
        wall0, cpu0 = clock(), cpu()
        sleep(_WINDOW_S)
        wall, used = clock() - wall0, cpu() - cpu0
        quiet = quiet + 1 if used < QUIET * wall else 0
    return clock() - start


def steady_call_time(
    fn: Callable[[], object],
    device: torch.device | str = "cpu",
    block_s: float = BLOCK_S,
    *,
    second: bool = False,
) -> float:
    """Seconds per call of ``fn`` in a steady phase: :func:`settle`, then untimed calls for
    :data:`WARM_S` (at least one), then as many calls back to back as the last untimed one
    says fill ``block_s`` (at least one), timed as one block; their mean is the sample. A
    first call of :data:`LONG_S` or more is the sample itself, or with ``second`` the call
    after it is (see the module docs)."""
    settle()
    watch = Stopwatch(device)
    last = warmed = _one_call(fn, watch)
    if last >= LONG_S:
        return _one_call(fn, watch) if second else last
    for _ in range(_MAX_CALLS):
        if warmed >= WARM_S:
            break
        last = _one_call(fn, watch)
        warmed += last
    calls = min(_MAX_CALLS, max(1, math.ceil(block_s / max(last, 1e-9))))
    watch.start()
    for _ in range(calls):
        fn()
    return watch.stop() / calls


def _one_call(fn: Callable[[], object], watch: Stopwatch) -> float:
    watch.start()
    fn()
    return watch.stop()
