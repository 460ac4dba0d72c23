"""Latency measurement that is right on every device: the one clock (:class:`Stopwatch`:
the wall clock with the device synchronised, and the device's own events on an
accelerator), warm-up, medians, speed ratios with their spread over interleaved rounds, and
the words for them (the one place that says "faster", "slower" or "too noisy to rank").

Benchmark scripts and the GPU steps time through this module too, never with a bare
``time.perf_counter()``: a CUDA call returns before its kernels finish."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

__all__ = [
    "Ratio",
    "Stopwatch",
    "Timing",
    "fastest_accurate",
    "measure",
    "measure_interleaved",
    "now",
    "ratio_of",
    "ratio_text",
    "spent_text",
    "spread_text",
    "synchronize",
    "timed_call",
]

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


def _device_event(dev: torch.device) -> Any:
    """A timing event of ``dev``'s backend (CUDA, XPU, ...), None on CPU or where the
    backend has none."""
    if dev.type == "cpu":
        return None
    backend = getattr(torch, dev.type, None)
    event_type = getattr(backend, "Event", None)
    return None if event_type is None else event_type(enable_timing=True)


class Stopwatch:
    """The one clock: seconds of work on ``device`` between :meth:`start` and :meth:`stop`
    (or a ``with`` block), the device synchronised at both ends, so that queued kernels
    count where they run and not where they were launched.

    ``seconds`` is what a caller waits (the wall clock); on an accelerator with timing
    events (CUDA, XPU) ``device_seconds`` is the device's own time between an event
    recorded at the start and one at the stop (launch gaps included, host work before
    the first kernel not), else None. ``clock``: the wall clock (tests pass a scripted
    one)::

        with Stopwatch(device) as watch:
            model(x)
        print(watch.seconds)
    """

    def __init__(
        self, device: torch.device | str = "cpu", *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.device = torch.device(device)
        self.clock = clock
        self._began: float | None = None
        self._events: tuple[Any, Any] | None = None
        self.seconds: float | None = None
        self.device_seconds: float | None = None

    def start(self) -> Stopwatch:
        """Wait for the work queued so far, then start timing."""
        synchronize(self.device)
        first = _device_event(self.device)
        if first is not None:
            first.record()
            self._events = (first, _device_event(self.device))
        self.seconds = self.device_seconds = None
        self._began = self.clock()
        return self

    def stop(self) -> float:
        """Wait for the work queued since :meth:`start`; returns (and keeps) ``seconds``."""
        if self._began is None:
            raise RuntimeError("Stopwatch.stop() before start(); call start() first")
        if self._events is not None:
            first, last = self._events
            last.record()
            last.synchronize()
            self.device_seconds = first.elapsed_time(last) / 1e3  # events count milliseconds
        synchronize(self.device)
        self.seconds = self.clock() - self._began
        self._began, self._events = None, None
        return self.seconds

    def __enter__(self) -> Stopwatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def timed_call(fn: Callable[[], object], device: torch.device | str = "cpu") -> float:
    """Seconds one call of ``fn`` takes on ``device``, synchronised after the call: the
    one timed call every measurement here (and the bench runner's and probe's) is made of."""
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def now(device: torch.device | str = "cpu") -> float:
    """The wall clock once ``device`` has finished its queued work: the start or end of a
    phase (a compile, a load, a whole run) that a :class:`Stopwatch` block does not fit."""
    synchronize(device)
    return time.perf_counter()


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
    return Timing(tuple(timed_call(fn, device) for _ in range(runs)))


def measure_interleaved(
    fns: Sequence[Callable[[], object]],
    *,
    device: torch.device | str = "cpu",
    warmup: int = 3,
    runs: int = 10,
) -> list[Timing]:
    """Time ``fns`` round-robin: each round calls every function once, so that round ``i``
    of each :class:`Timing` saw the same state of the machine (pair them with
    :func:`ratio_of`). Each function is warmed up ``warmup`` times first."""
    if runs < 1 or warmup < 0:
        raise ValueError(f"need runs >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    for fn in fns:
        for _ in range(warmup):
            fn()
    synchronize(device)
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, out in zip(fns, samples, strict=True):
            out.append(timed_call(fn, device))
    return [Timing(tuple(s)) for s in samples]


@dataclass(frozen=True)
class Ratio:
    """How many times faster one thing ran than a reference: the median and the quartiles of
    the per-round ratios ``reference / other`` over ``rounds`` interleaved rounds.

    ``ranked`` is the verdict: True only when the whole interquartile range lies on one side
    of 1, so that "faster" or "slower" is what most rounds said; otherwise the two are too
    noisy to rank.
    """

    median: float
    q1: float
    q3: float
    rounds: int

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"Ratio(rounds={self.rounds}): a ratio needs at least one round")
        if not self.q1 <= self.median <= self.q3:
            raise ValueError(
                f"Ratio(median={self.median}, q1={self.q1}, q3={self.q3}): need q1 <= median <= q3"
            )

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def ranked(self) -> bool:
        """Whether the spread supports a ranking: more than one round, and the interquartile
        range entirely above 1 (faster) or entirely below it (slower)."""
        return self.rounds > 1 and (self.q1 > 1.0 or self.q3 < 1.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "q1": self.q1,
            "q3": self.q3,
            "iqr": self.iqr,
            "rounds": self.rounds,
            "ranked": self.ranked,
        }


def ratio_of(reference: Timing, other: Timing) -> Ratio:
    """The speed of ``other`` relative to ``reference`` (above 1: ``other`` is faster), from
    the per-round ratios of two timings measured interleaved (:func:`measure_interleaved`).
    """
    if len(reference.samples) != len(other.samples):
        raise ValueError(
            f"ratio_of needs timings of the same rounds, got {len(reference.samples)} and "
            f"{len(other.samples)} samples; measure them with measure_interleaved"
        )
    ratios = sorted(
        a / b if b > 0 else math.inf for a, b in zip(reference.samples, other.samples, strict=True)
    )
    if len(ratios) == 1:
        return Ratio(ratios[0], ratios[0], ratios[0], 1)
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return Ratio(median, q1, q3, len(ratios))


def ratio_text(ratio: float | None, more: str = "faster", less: str = "slower") -> str:
    """``2.10x faster`` for ratios above 1, ``11.0x slower`` below 1 (never ``0.09x``)."""
    if ratio is None or math.isnan(ratio) or ratio <= 0:
        return "-"
    if ratio >= 1:
        return f"{ratio:.2f}x {more}"
    inverse = 1 / ratio
    return f"{inverse:.3g}x {less}" if inverse < 10 else f"{inverse:.1f}x {less}"


def spread_text(speed: Ratio, more: str = "faster", less: str = "slower") -> str:
    """``2.10x faster (IQR 1.95-2.30x over 10 rounds)`` or ``7.34x slower (IQR 7.10-7.70x
    over 10 rounds)`` when the interquartile range of the per-round ratios lies on one side
    of 1, the range read the same way as the median; otherwise ``too noisy to rank`` with
    the range of the ratio that says so: no ranking is printed that the spread does not
    support."""
    if speed.rounds < 2:
        return f"too noisy to rank ({speed.median:.2f}x from 1 round: no spread)"
    rounds = f"over {speed.rounds} rounds"
    if not speed.ranked:
        return f"too noisy to rank (IQR {speed.q1:.2f}-{speed.q3:.2f}x {rounds})"
    low, high = (speed.q1, speed.q3) if speed.q1 > 1 else (1 / speed.q3, 1 / speed.q1)
    return f"{ratio_text(speed.median, more, less)} (IQR {low:.2f}-{high:.2f}x {rounds})"


def spent_text(verb: str, seconds: dict[str, float]) -> str:
    """Where a run's time went: ``deploy took 41.9 s: compile 30.2 s, timing 6.1 s, ...``
    from ``seconds`` by phase and ``"total"``, the largest phase first."""
    parts = sorted(((k, v) for k, v in seconds.items() if k != "total"), key=lambda kv: -kv[1])
    spent = ", ".join(f"{k} {v:.1f} s" for k, v in parts)
    return f"{verb} took {seconds.get('total', 0.0):.1f} s: {spent}"
