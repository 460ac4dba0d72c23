"""Each timed sample in a steady phase of its own: a variant whose threads keep working
after a call returns must not slow the fp32 call timed next to it (which made a runtime
look faster than it is), and the wait for quiet is tested with injected clocks."""

from __future__ import annotations

import copy
import functools
import hashlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.bench import interleave, runner, steady
from halfprec.bench.steady import QUIET, settle
from halfprec.bench.variants import Variant
from halfprec.timing import Stopwatch

_DATA = bytes(256 * 1024)
_HUNG_S = 600.0  # a wait for quiet this long means a thread that never stops, not a slow machine


class _Burner:
    """A real background thread that keeps a core busy after each candidate call, as a
    runtime's worker threads spin on after a call returns: the call returns once the burst
    has begun (hashing in C with the GIL released, as those threads run), and the burst
    lasts until the harness has sampled the process's CPU time ``looks`` times during it,
    then until the thread has stopped. :meth:`cpu` is that CPU time with an open burst
    counted as a core busy all along (the thread may be parked by a loaded machine's
    scheduler mid-burst, when the kernel counts nothing). So whether the harness waits for
    the burst to end depends on the harness alone, not on the machine's speed or load."""

    def __init__(self, looks: int = 2) -> None:
        self.looks, self.stop = looks, False
        self.bursts: list[tuple[float, float]] = []
        self.open_since: float | None = None
        self.seen = 0  # samples of :meth:`cpu` taken during the open burst
        self.seen_busy = 0  # ... during any burst
        self.lock = threading.Lock()
        self.wake, self.started = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def after_call(self) -> None:
        with self.lock:
            if self.open_since is not None:  # still spinning from the last call
                return
            self.started.clear()
            self.wake.set()
        self.started.wait()

    def cpu(self) -> float:
        with self.lock:
            now, since = time.perf_counter(), self.open_since
            if since is not None:
                self.seen += 1
                self.seen_busy += 1
        return time.process_time() + (0.0 if since is None else now - since)

    def close(self) -> None:
        self.stop = True
        self.wake.set()
        self.thread.join()

    def _run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.stop:
                return
            with self.lock:
                start = self.open_since = time.perf_counter()
                self.seen = 0
            self.started.set()
            while self.seen < self.looks and not self.stop:
                hashlib.sha256(_DATA)  # C, without the GIL
            with self.lock:
                self.open_since = None
                self.bursts.append((start, time.perf_counter()))


class SpinsAfterEachCall(nn.Module):
    """fp32's work done three times (so it is slower than fp32), then a burst of CPU work on
    a background thread that outlives the call."""

    def __init__(self, model: nn.Module, burner: _Burner) -> None:
        super().__init__()
        self.model, self.burner = model, burner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            out = self.model(x)
        self.burner.after_call()
        return out


class Recorded(nn.Module):
    """The fp32 model, noting when each of its calls ran while ``timing`` is on."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.timing = False
        self.calls: list[tuple[float, float]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        out = self.model(x)
        if self.timing:
            self.calls.append((start, time.perf_counter()))
        return out


@pytest.fixture
def burner() -> Iterator[_Burner]:
    b = _Burner()
    yield b
    b.close()


def test_no_timed_fp32_call_runs_while_a_candidates_thread_spins(
    burner: _Burner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness waits for the process's threads to go idle before each timed block: no
    timed fp32 call overlaps a burst of the candidate's thread, whatever the machine's speed
    or load (the wait for quiet reads the burner's :meth:`cpu`; it ends once the burst it
    meets has been sampled, so its bound here is only there to end a hung test)."""
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).eval()
    fp32 = Recorded(copy.deepcopy(plain)).eval()
    spinning = Variant("halfprec", torch.bfloat16)
    real_build, real_time = runner.build_variant, interleave.time_interleaved

    def build(model: nn.Module, variant: Variant, *args: Any, **kwargs: Any) -> nn.Module:
        if variant == spinning:  # the real fp32 work, then a real busy thread
            return SpinsAfterEachCall(copy.deepcopy(plain), burner)
        return real_build(model, variant, *args, **kwargs)

    def timed_rounds(*args: Any, **kwargs: Any) -> dict[int, list[float]]:
        fp32.timing = True  # only the calls of the timed rounds
        try:
            return real_time(*args, **kwargs)
        finally:
            fp32.timing = False

    monkeypatch.setattr(runner, "build_variant", build)
    monkeypatch.setattr(interleave, "time_interleaved", timed_rounds)
    waits: list[float] = []

    def settle_for_the_burner() -> float:
        waits.append(settle(max_s=_HUNG_S, cpu=burner.cpu))
        return waits[-1]

    monkeypatch.setattr(steady, "settle", settle_for_the_burner)
    config = BenchConfig(warmup=2, runs=8, memory="none", skip_slower_than=None, limit=False)
    result = benchmark(fp32, torch.randn(8, 64), variants=["halfprec-bf16"], bench=config)
    burner.close()  # ends a burst still open
    overlaps = [
        (call, burst)
        for call in fp32.calls
        for burst in burner.bursts
        if call[0] < burst[1] and burst[0] < call[1]
    ]
    assert max(waits) < _HUNG_S, "a wait for quiet gave up: a thread of this process never stopped"
    assert overlaps == [], f"{len(overlaps)} timed fp32 calls ran beside the busy thread"
    assert fp32.calls and burner.bursts and burner.seen_busy  # the wait met open bursts
    assert result.get("halfprec-bf16").accurate


class _Clocks:
    """A process whose threads stay busy for ``busy_windows`` sleeps of 1 ms, then idle."""

    def __init__(self, busy_windows: int) -> None:
        self.wall = self.cpu_s = 0.0
        self.busy_windows = busy_windows
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        self.wall += seconds
        self.sleeps += 1
        if self.sleeps <= self.busy_windows:
            self.cpu_s += seconds  # one core busy all the window
        else:
            self.cpu_s += seconds * QUIET / 2


def test_settle_waits_until_the_process_is_quiet() -> None:
    clocks = _Clocks(busy_windows=5)
    waited = settle(cpu=lambda: clocks.cpu_s, clock=lambda: clocks.wall, sleep=clocks.sleep)
    assert clocks.sleeps == 8 and waited == pytest.approx(0.008)  # 5 busy, then 3 quiet


def test_settle_gives_up_after_its_longest_wait() -> None:
    clocks = _Clocks(busy_windows=10**6)
    waited = settle(
        max_s=0.02, cpu=lambda: clocks.cpu_s, clock=lambda: clocks.wall, sleep=clocks.sleep
    )
    assert waited == pytest.approx(0.02) and clocks.sleeps == 20


class _ColdAfterWait:
    """A call that takes ``cold`` seconds right after the wait for quiet and ``warm`` once a
    call ran before it, on an injected clock (for :class:`~halfprec.timing.Stopwatch`)."""

    def __init__(self, cold: float, warm: float) -> None:
        self.cold, self.warm = cold, warm
        self.now, self.calls, self.waited = 0.0, 0, True

    def settle(self) -> float:
        self.waited = True
        return 0.0

    def __call__(self) -> None:
        self.now += self.cold if self.waited else self.warm
        self.waited = False
        self.calls += 1


@pytest.mark.parametrize(("cold", "warm"), [(0.006, 0.003), (0.003, 0.001), (0.0004, 0.0001)])
def test_sample_is_the_warm_calls_of_a_steady_loop_not_the_cold_first(
    cold: float, warm: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call right after the wait (and the switch from another variant) is cold; a user's
    loop pays that once, so it is never part of the sample, whatever the call's length."""
    fn = _ColdAfterWait(cold, warm)
    monkeypatch.setattr(steady, "settle", fn.settle)
    monkeypatch.setattr(steady, "Stopwatch", functools.partial(Stopwatch, clock=lambda: fn.now))
    assert [steady.steady_call_time(fn) for _ in range(3)] == pytest.approx([warm] * 3)


def test_a_long_call_is_its_own_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call of LONG_S or more is timed once: its cold start is a small share of it, and a
    second call would double the time a slow model's benchmark takes."""
    fn = _ColdAfterWait(steady.LONG_S * 1.02, steady.LONG_S)
    monkeypatch.setattr(steady, "settle", fn.settle)
    monkeypatch.setattr(steady, "Stopwatch", functools.partial(Stopwatch, clock=lambda: fn.now))
    assert steady.steady_call_time(fn) == pytest.approx(steady.LONG_S * 1.02)
    assert fn.calls == 1


def test_a_long_call_after_an_untimed_one_is_the_sample_where_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``second`` (deploy's end, for a short pair) the first long call after the wait
    is left untimed and the next is the sample: a loop's cost, not the first call's."""
    fn = _ColdAfterWait(steady.LONG_S * 0.94 * 2, steady.LONG_S * 2)
    monkeypatch.setattr(steady, "settle", fn.settle)
    monkeypatch.setattr(steady, "Stopwatch", functools.partial(Stopwatch, clock=lambda: fn.now))
    assert steady.steady_call_time(fn, second=True) == pytest.approx(steady.LONG_S * 2)
    assert fn.calls == 2
