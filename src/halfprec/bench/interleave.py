"""The timed rounds of a benchmark: a candidate's timed calls alternate with eager fp32's,
round by round (a pair), so that a burst of load on a shared machine hits both alike, and
each candidate is raced (:class:`~halfprec.bench.race.Race`: no more rounds once its rank
is settled).

The runner holds one candidate at a time (the reference and one candidate on the device,
never every variant), so candidates are timed in separate pairs. The race compares them
through the common reference: each candidate's time relative to fp32's in the same round
of its pair (:class:`Standings` keeps those of the candidates timed before at the same
batch size), so that a candidate clearly slower than fp32, or than an accurate candidate
timed in an earlier pair, still stops after a few rounds.

A round's order alternates (fp32 then the candidate, then the candidate then fp32), as in a
crossover trial: whatever one variant's call leaves behind for the next call on the machine
and outlasts the wait for quiet (a runtime's threads pinned or parked on a core, its data in
the caches, a frequency step) then falls on each variant in half the rounds. In a fixed
order it fell on the same variant in every round, so a bias the rounds all shared moved the
claimed ratio while its spread stayed narrow; a user's loop calls one variant after itself.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from halfprec.batch import Batch, call
from halfprec.bench.race import Race
from halfprec.bench.results import VariantResult, relative_rounds
from halfprec.bench.steady import BLOCK_S
from halfprec.bench.variants import Variant
from halfprec.modules import first_line
from halfprec.timing import Timing

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


@dataclass
class Standings:
    """The candidates timed so far at one batch size: each one's per-round time relative
    to eager fp32's in the same round of its pair (``relative``), and those the choice may
    pick (``eligible``) or claim (``claimable``: those and the accurate runtime targets).
    :func:`time_interleaved` races a new candidate against them and adds it."""

    relative: dict[Variant, list[float]] = field(default_factory=dict)
    eligible: set[Variant] = field(default_factory=set)
    claimable: set[Variant] = field(default_factory=set)


def _eligible(rows: dict[int, VariantResult], runtimes: bool = False) -> set[int]:
    """The rows the choice may pick (ok, accurate, a choosable way); with ``runtimes`` also
    the runtime targets deploy may pick over them, whose speedup it then claims."""
    return {
        i
        for i, r in rows.items()
        if r.status == "ok"
        and r.accurate
        and (r.variant.way.choosable or (runtimes and r.variant.runtime))
    }


def _race_samples(
    prepared: Sequence[Prepared],
    samples: dict[int, list[float]],
    ref: int | None,
    standings: Standings,
) -> dict[Variant, list[float]]:
    """What the race ranks, by variant: with a reference, every time relative to the
    reference's in the same round (the reference itself 1.0), beside the standings of
    earlier pairs; without one, the seconds themselves."""
    if ref is None:
        return {prepared[i].result.variant: s for i, s in samples.items() if s}
    fp32 = samples[ref]
    ranked = {v: list(s) for v, s in standings.relative.items()}
    ranked[prepared[ref].result.variant] = [1.0] * len(fp32)
    for i, s in samples.items():
        if i != ref and s:
            ranked[prepared[i].result.variant] = relative_rounds(s, fp32)
    return ranked


def _playing(
    prepared: Sequence[Prepared],
    modules: dict[int, nn.Module],
    ref: int | None,
    samples: dict[int, list[float]],
    stopped: set[int],
    round_: int,
    race: Race | None,
    claiming: int | None = None,
) -> list[int]:
    """The variants that play round ``round_``: not stopped, with rounds left (the
    ``claiming`` leader past its planned rounds too: :meth:`Race.claiming`), still ok; fp32
    (``ref``) only when another plays, or alone for the race's ``min_rounds``."""
    now = [
        i
        for i in modules
        if i not in stopped
        and (round_ < prepared[i].runs or (claiming is not None and i in (claiming, ref)))
        and prepared[i].result.status == "ok"
    ]
    if race is not None and ref is not None:
        others = [i for i in now if i != ref] if ref in now else []
        paired = any(samples[i] for i in modules if i != ref)
        alone = ref in now and not paired and len(samples[ref]) < race.min_rounds
        now = sorted(others + ([ref] if others or alone else []))
    return now


def _timed_s(samples: dict[int, list[float]], ref: int | None, i: int) -> float:
    """Seconds the timed calls of ``i``'s rounds and fp32's in them took, a sample counted
    as its block (:data:`~halfprec.bench.steady.BLOCK_S` at least: a steady sample times
    that long a block of calls, or one longer call)."""
    rounds = len(samples[i])
    fp32 = samples[ref][:rounds] if ref is not None and ref != i else []
    return sum(max(s, BLOCK_S) for s in [*samples[i], *fp32])


def _stopped(
    prepared: Sequence[Prepared],
    samples: dict[int, list[float]],
    ref: int | None,
    race: Race,
    standings: Standings,
) -> tuple[set[int], int | None]:
    """The variants of this run whose rank the race says is settled (never the reference),
    and the one still timed for its claim past its planned rounds, if any
    (:meth:`Race.claiming`: the leader, while its pair's timed seconds are short)."""
    rows = {i: prepared[i].result for i in samples}
    eligible = {rows[i].variant for i in _eligible(rows)} | standings.eligible
    claimable = {rows[i].variant for i in _eligible(rows, runtimes=True)} | standings.claimable
    ranked = _race_samples(prepared, samples, ref, standings)
    timed = {rows[i].variant: _timed_s(samples, ref, i) for i in samples if i != ref}
    done = race.settled(ranked, eligible, claimable, timed)
    lead = race.leader(ranked, claimable)
    claiming = next(
        (
            i
            for i in samples
            if i != ref
            and rows[i].variant == lead
            and race.claiming(len(samples[i]), timed[rows[i].variant])
        ),
        None,
    )
    return {i for i in samples if i != ref and rows[i].variant in done}, claiming


def time_interleaved(
    prepared: Sequence[Prepared],
    batch: Batch,
    race: Race | None,
    timer: CallTimer,
    standings: Standings | None = None,
) -> dict[int, list[float]]:
    """Time the variants round-robin, one call each per round, in ``prepared``'s order in
    even rounds and the reverse in odd ones (see the module docs), set each row's timing,
    and return each timed variant's seconds by its index in ``prepared``.

    The runner passes two: eager fp32 (the reference) and one candidate. With ``race`` a
    variant stops once its rank is settled (beaten by a variant the choice may pick, or
    apart from all others), ranked by its time relative to the reference's in the same
    round, beside the ``standings`` of the candidates timed before at this batch size (to
    which it is added). fp32 is timed in every round any other variant is, and the others
    stop when it stops: a round without it cannot be paired. fp32 timed alone (nothing
    else to time) stops after the race's ``min_rounds``."""
    standings = Standings() if standings is None else standings
    modules = {i: p.module for i, p in enumerate(prepared) if p.timed and p.module is not None}
    samples: dict[int, list[float]] = {i: [] for i in modules}
    ref = next((i for i in modules if prepared[i].result.variant == Variant("fp32")), None)
    stopped: set[int] = set()
    claiming: int | None = None
    with torch.inference_mode():  # the caller's fp32 settings: fp32 as the user runs it
        for round_ in itertools.count():
            now = _playing(prepared, modules, ref, samples, stopped, round_, race, claiming)
            if not now:
                break
            for i in now if round_ % 2 == 0 else reversed(now):
                r = prepared[i].result
                try:
                    samples[i].append(timer(functools.partial(call, modules[i], batch), r.variant))
                except Exception as exc:
                    r.status, r.note = "failed", first_line(exc)
            if race is not None:
                done, claiming = _stopped(prepared, samples, ref, race, standings)
                stopped |= done
    _record(prepared, samples, ref, standings)
    return samples


def _record(
    prepared: Sequence[Prepared],
    samples: dict[int, list[float]],
    ref: int | None,
    standings: Standings,
) -> None:
    """Each timed row's timing; each candidate's relative times into ``standings``."""
    for i, r_samples in samples.items():
        r = prepared[i].result
        if r.status != "ok" or not r_samples:
            continue
        r.timing = Timing(tuple(r_samples))
        if ref is not None and i != ref:
            standings.relative[r.variant] = relative_rounds(r_samples, samples[ref])
            if i in _eligible({i: r}):
                standings.eligible.add(r.variant)
            if i in _eligible({i: r}, runtimes=True):
                standings.claimable.add(r.variant)


@dataclass
class Pairs:
    """Eager fp32 at one batch size (``fp32``: its row, the module and its planned rounds)
    and the pairs every candidate there is timed in with it: fp32's calls pooled over the
    pairs (``rounds``), how many pairs ran, and the candidates' :class:`Standings`."""

    fp32: Prepared
    batch: Batch
    rounds: list[float] = field(default_factory=list)
    pairs: int = 0
    standings: Standings = field(default_factory=Standings)

    def time(self, candidate: Prepared, race: Race | None, timer: CallTimer) -> None:
        """Time ``candidate`` interleaved with fp32 (:func:`time_interleaved`); fp32's calls
        in the pair become the candidate's ``reference_timing`` and join ``rounds``."""
        samples = time_interleaved([self.fp32, candidate], self.batch, race, timer, self.standings)
        fp32 = samples.get(0, [])
        self.rounds.extend(fp32)
        self.pairs += 1
        if fp32 and candidate.result.timing is not None:
            candidate.result.reference_timing = Timing(tuple(fp32))

    def pool(self, race: Race | None, timer: CallTimer) -> None:
        """Set fp32's row timing to its calls pooled from every pair, after timing it alone
        where no candidate was paired with it."""
        if not self.rounds and self.fp32.timed:
            self.rounds = time_interleaved([self.fp32], self.batch, race, timer).get(0, [])
        if self.rounds and self.fp32.result.status == "ok":
            self.fp32.result.timing = Timing(tuple(self.rounds))
