"""Each timed sample in a steady phase of its own: a variant whose threads keep working
after a call returns must not slow the fp32 call timed next to it (which made a runtime
look faster than it is), and the wait for quiet is tested with injected clocks."""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.bench import interleave, runner
from halfprec.bench.results import fastest_variant
from halfprec.bench.steady import QUIET, settle
from halfprec.bench.variants import Variant

_DATA = bytes(256 * 1024)


class _Burner:
    """A real background thread that keeps a core busy for ``burn_s`` after each candidate
    call, as a runtime's worker threads spin on after a call returns. It hashes in C with
    the GIL released (as those threads run), and records when it was busy."""

    def __init__(self, burn_s: float) -> None:
        self.burn_s, self.stop = burn_s, False
        self.bursts: list[tuple[float, float]] = []
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def after_call(self) -> None:
        self.wake.set()

    def close(self) -> None:
        self.stop = True
        self.wake.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stop:
            self.wake.wait()
            self.wake.clear()
            start = time.perf_counter()
            while time.perf_counter() < start + self.burn_s:
                hashlib.sha256(_DATA)  # C, without the GIL
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
    b = _Burner(burn_s=0.003)
    yield b
    b.close()


def test_a_candidate_that_spins_after_each_call_gets_no_speedup(
    burner: _Burner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No timed fp32 call runs while the candidate's thread is busy, and the candidate,
    which does three times fp32's work, is not faster."""
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
    config = BenchConfig(warmup=2, runs=8, memory="none", skip_slower_than=None, limit=False)
    result = benchmark(fp32, torch.randn(8, 64), variants=["halfprec-bf16"], bench=config)
    overlaps = [
        (call, burst)
        for call in fp32.calls
        for burst in burner.bursts
        if call[0] < burst[1] and burst[0] < call[1]
    ]
    assert fp32.calls and burner.bursts
    assert overlaps == [], f"{len(overlaps)} timed fp32 calls ran beside the busy thread"
    row = result.get("halfprec-bf16")
    assert row.accurate and row.speedup is not None and row.speedup < 1.0, row.speedup
    assert fastest_variant(result).name == "fp32"


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
