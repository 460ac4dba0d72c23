"""Latency measurement that is right on every device: warm-up, synchronisation, medians."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import torch

__all__ = ["Timing", "fastest_accurate", "measure", "synchronize"]

T = TypeVar("T")


def fastest_accurate(
    baseline: T,
    candidates: Iterable[T],
    latency: Callable[[T], float | None],
    accurate: Callable[[T], bool],
) -> T:
    """The one decision "fastest accurate variant" (tune, bench, deploy): the candidate
    with the lowest latency among those that are accurate and were timed, if it beats
    ``baseline`` (fp32); else ``baseline``. Ties keep the earlier one."""
    best, best_s = baseline, latency(baseline)
    for c in candidates:
        s = latency(c)
        if c is baseline or s is None or not accurate(c):
            continue
        if best_s is None or s < best_s:
            best, best_s = c, s
    return best


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels on ``device`` (a no-op on CPU)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type != "cpu" and hasattr(torch, dev.type):
        sync = getattr(getattr(torch, dev.type), "synchronize", None)
        if callable(sync):
            sync()


@dataclass(frozen=True)
class Timing:
    """Per-call latencies in seconds, after warm-up."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p90(self) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]

    @property
    def spread(self) -> float:
        """(p90 - min) / median: above ~0.2 the machine was too noisy to trust small ratios."""
        return (self.p90 - min(self.samples)) / self.median if self.median > 0 else 0.0


def measure(
    fn: Callable[[], object],
    *,
    device: torch.device | str = "cpu",
    warmup: int = 3,
    runs: int = 10,
) -> Timing:
    """Call ``fn`` ``warmup`` times, then time ``runs`` calls, synchronising the device."""
    if runs < 1 or warmup < 0:
        raise ValueError(f"need runs >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        synchronize(device)
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples))
