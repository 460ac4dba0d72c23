"""The timed rounds of a benchmark: every variant's timed calls round-robin, so that a burst
of load on a shared machine hits them alike, each variant raced
(:class:`~halfprec.bench.race.Race`: no more rounds once its rank is settled)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from halfprec.batch import Batch, call
from halfprec.bench.race import Race
from halfprec.bench.results import CHOICE_KINDS, VariantResult
from halfprec.bench.variants import Variant
from halfprec.fp32 import exact_fp32
from halfprec.modules import first_line
from halfprec.timing import Timing

__all__ = ["CallTimer", "Prepared", "time_interleaved"]

CallTimer = Callable[[Callable[[], object], Variant], float]
"""Times one timed call of a variant: ``timer(fn, variant) -> seconds``. The default calls
``fn`` and synchronises the device around a wall clock; tests pass scripted timings."""


@dataclass
class Prepared:
    """One variant built, warmed and checked at one batch size: its row, the module to time
    (None: not timed) and how many timed rounds it may run."""

    result: VariantResult
    module: nn.Module | None
    runs: int

    @property
    def timed(self) -> bool:
        return self.module is not None and self.runs > 0 and self.result.status == "ok"


def _eligible(rows: dict[int, VariantResult]) -> set[int]:
    return {
        i
        for i, r in rows.items()
        if r.status == "ok" and r.accurate and r.variant.kind in CHOICE_KINDS
    }


def _playing(
    prepared: Sequence[Prepared],
    modules: dict[int, nn.Module],
    ref: int | None,
    samples: dict[int, list[float]],
    stopped: set[int],
    round_: int,
    race: Race | None,
) -> list[int]:
    """The variants that play round ``round_``: not stopped, with rounds left, still ok;
    fp32 (``ref``) only when another plays, or alone for the race's ``min_rounds``."""
    now = [
        i
        for i in modules
        if i not in stopped and round_ < prepared[i].runs and prepared[i].result.status == "ok"
    ]
    if race is not None and ref is not None:
        others = [i for i in now if i != ref] if ref in now else []
        paired = any(samples[i] for i in modules if i != ref)
        alone = ref in now and not paired and len(samples[ref]) < race.min_rounds
        now = sorted(others + ([ref] if others or alone else []))
    return now


def time_interleaved(
    prepared: Sequence[Prepared], batch: Batch, race: Race | None, timer: CallTimer
) -> None:
    """Time the variants round-robin, one call each per round, and set each row's timing.

    With ``race`` a variant stops once its rank is settled (beaten by a variant the choice
    may pick, or apart from all others). fp32, the reference every speedup is measured
    against, is timed in every round any other variant is, and the others stop when it
    stops: a round without it cannot be paired. fp32 timed alone (nothing else to time)
    stops after the race's ``min_rounds``."""
    modules = {i: p.module for i, p in enumerate(prepared) if p.timed and p.module is not None}
    samples: dict[int, list[float]] = {i: [] for i in modules}
    ref = next((i for i in modules if prepared[i].result.variant == Variant("fp32")), None)
    stopped: set[int] = set()
    with torch.inference_mode(), exact_fp32():
        for round_ in range(max((prepared[i].runs for i in modules), default=0)):
            now = _playing(prepared, modules, ref, samples, stopped, round_, race)
            if not now:
                break
            for i in now:
                r = prepared[i].result
                try:
                    samples[i].append(timer(functools.partial(call, modules[i], batch), r.variant))
                except Exception as exc:
                    r.status, r.note = "failed", first_line(exc)
            if race is not None:
                rows = {i: prepared[i].result for i in modules}
                timed = {i: samples[i] for i in modules if samples[i]}
                stopped |= race.settled(timed, _eligible(rows)) - {ref}
    for i, r_samples in samples.items():
        r = prepared[i].result
        if r.status == "ok" and r_samples:
            r.timing = Timing(tuple(r_samples))
