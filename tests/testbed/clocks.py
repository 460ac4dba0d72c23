"""A scripted clock for the slow-dtype probe (:data:`halfprec.bench.limit.Timer`), so that
tests can feed it the noisy timings of a busy machine."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import torch

__all__ = ["ScriptedClock"]


class ScriptedClock:
    """The n-th timed fp32 call takes the n-th of ``fp32`` seconds, the n-th call of the
    half dtype the n-th of ``half`` (both cycling); nothing is called. ``calls`` counts the
    timed calls, by ``"fp32"`` and ``"half"``."""

    def __init__(self, fp32: Sequence[float], half: Sequence[float]) -> None:
        if not fp32 or not half:
            raise ValueError("ScriptedClock(fp32, half) needs at least one time in each")
        self.times = {"fp32": list(fp32), "half": list(half)}
        self.calls: Counter[str] = Counter()

    def __call__(self, fn: Callable[[], object], dtype: torch.dtype) -> float:
        key = "fp32" if dtype == torch.float32 else "half"
        n = self.calls[key]
        self.calls[key] += 1
        return self.times[key][n % len(self.times[key])]
