"""Scripted clocks: for the slow-dtype probe (:data:`halfprec.bench.limit.Timer`), so that
tests can feed it the noisy timings of a busy machine, and for a variant's timed calls
(:data:`halfprec.bench.interleave.CallTimer`), and a module whose calls advance an injected
clock (:class:`Advances`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import torch
from torch import nn

from halfprec.bench.variants import Variant

__all__ = ["Advances", "ScriptedClock", "VariantClock"]


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


class VariantClock:
    """Each variant's timed call takes its fixed ``seconds`` (by variant name); the call
    itself runs. ``calls``: the variants' names in the order they were timed."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.calls = seconds, list[str]()

    @property
    def timed(self) -> set[str]:
        """The names of the variants timed at least once."""
        return set(self.calls)

    def __call__(self, fn: Callable[[], object], variant: Variant) -> float:
        fn()
        self.calls.append(variant.name)
        return self.seconds[variant.name]


class Advances(nn.Module):
    """``model`` whose every call first advances an injected clock (``advance``): a
    machine's speed scripted per call, for the real steady-phase timing code."""

    def __init__(self, model: nn.Module, advance: Callable[[], None]) -> None:
        super().__init__()
        self.model, self.advance = model, advance

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.advance()
        return self.model(x)
