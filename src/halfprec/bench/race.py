"""Racing: stop timing a variant as soon as its place in the ranking is settled.

The runner times each candidate in rounds alternating with eager fp32 (a pair:
:mod:`halfprec.bench.interleave`), and ranks candidates of different pairs by their
per-round times relative to fp32's. After each round, :meth:`Race.settled` says which
variants need no more rounds:

- a variant *beaten* by a variant that could be chosen (accurate, and of a kind the choice
  considers): even its fastest call was slower than the other's slowest by ``margin``, so
  it cannot be the fastest choice, however many more rounds it ran;
- a variant *apart* from every other timed variant, faster or slower than each by that
  margin: its rank is fixed.

Load on a shared machine only ever makes calls slower. Comparing one variant's fastest
call with the other's slowest is therefore safe against it: a burst that slows one call of
the slower variant cannot lower its fastest call, and a burst on the faster variant raises
its slowest call, which only delays the verdict. One noisy reading can delay a drop,
never cause one. No verdict comes before ``min_rounds`` timed rounds of both variants,
except for variants clearly apart: after ``early_rounds`` (2) rounds of both, a variant whose
fastest call is slower than the other's slowest by ``early_margin`` (1.0: twice as long),
or by ``margin`` and by more than ``early_spreads`` (2) times the spread of both variants'
rounds together (each one's slowest less its fastest), is settled already. The second rule
scales the verdict by the noise the rounds themselves show: on a steady machine, where
rounds agree within a few percent, a candidate 1.4 times slower than the leader is settled
after 2 rounds; where load scatters the rounds by as much as the gap, it waits for
``min_rounds``. Two variants whose rounds come from one distribution (no true difference)
land apart like that in about 2% of races (both of one variant's rounds above both of the
other's: 1 in 6; the gap between them over twice the two spreads: 1 in 9 where the
rounds spread uniformly), and dropping a variant that is only as fast as the leader costs the choice
nothing. Where one call takes seconds (BERT-base on a CPU) that saves a round of each
variant that is clearly behind; close variants still run ``min_rounds``.

The variant the choice would pick now (the claimable one fastest by its median: eligible, or
a runtime target deploy may pick over them) is not
stopped before ``claim_rounds`` (5) rounds, whatever its margin: its speedup is what deploy
and bench claim, and the spread claimed with it (the interquartile range of its per-round
ratios) says little over 2 or 3 rounds. Nor before the timed calls of its pair (its own and
fp32's) add up to ``claim_s`` seconds, up to ``claim_max_rounds`` rounds: a machine's speed
drifts over seconds (other tenants' use of the shared cache and memory bandwidth, where
the host runs the threads), and not alike for every variant, so rounds taken within a
fraction of a second share one moment's ratio, and their spread is narrower than the
ratio's drift that a user's loop sees from one second to the next. The caller counts
the seconds (:mod:`halfprec.bench.interleave`), so this part of the claim may run past
the rounds a variant was planned.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Race"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Race:
    """When a timed variant may stop: after ``min_rounds`` rounds, once its fastest call is
    slower than another's slowest by ``margin`` (0.1: 10%), or faster than its fastest by
    as much; after ``early_rounds`` rounds already when that holds by ``early_margin``, or
    by ``margin`` and by over ``early_spreads`` times both variants' spreads; the
    leading eligible variant not before ``claim_rounds`` rounds, nor before its pair's timed
    calls add up to ``claim_s`` seconds (at most ``claim_max_rounds`` rounds)."""

    min_rounds: int = 3
    margin: float = 0.1
    early_rounds: int = 2
    early_margin: float = 1.0
    early_spreads: float = 2.0
    claim_rounds: int = 5
    claim_s: float = 2.0
    claim_max_rounds: int = 100

    def __post_init__(self) -> None:
        for name in ("min_rounds", "early_rounds"):
            if getattr(self, name) < 2:
                raise ValueError(
                    f"Race({name}={getattr(self, name)}): a rank needs at least 2 rounds of each"
                )
        if not self.margin >= 0 or not self.early_spreads >= 0:
            raise ValueError(
                f"Race(margin={self.margin}, early_spreads={self.early_spreads}): both must be >= 0"
            )
        if self.claim_rounds < self.min_rounds:
            raise ValueError(
                f"Race(claim_rounds={self.claim_rounds}): the leader's claim needs at least "
                f"min_rounds={self.min_rounds} rounds"
            )
        if not self.claim_s >= 0 or self.claim_max_rounds < self.claim_rounds:
            raise ValueError(
                f"Race(claim_s={self.claim_s}, claim_max_rounds={self.claim_max_rounds}): "
                f"need claim_s >= 0 and claim_max_rounds >= claim_rounds={self.claim_rounds}"
            )
        if self.early_rounds > self.min_rounds or not self.early_margin >= self.margin:
            raise ValueError(
                f"Race(early_rounds={self.early_rounds}, early_margin={self.early_margin}): "
                f"an early verdict needs at most min_rounds={self.min_rounds} rounds and at "
                f"least margin={self.margin}"
            )

    def beaten(self, mine: Sequence[float], theirs: Sequence[float]) -> bool:
        """Whether ``mine`` (one variant's per-call seconds) is settled slower than
        ``theirs``: both have ``min_rounds`` samples and the fastest of ``mine`` is slower
        than the slowest of ``theirs`` by ``margin``, or both have ``early_rounds`` samples
        and it is slower by ``early_margin``, or by ``margin`` and by more than
        ``early_spreads`` times the two spreads (slowest less fastest) together."""
        rounds = min(len(mine), len(theirs))
        if rounds < self.early_rounds:
            return False
        fastest, slowest = min(mine), max(theirs)
        if rounds >= self.min_rounds:
            return fastest > (1 + self.margin) * slowest
        spread = max(mine) - fastest + slowest - min(theirs)
        clearly = fastest > (1 + self.margin) * slowest and fastest - slowest > (
            self.early_spreads * spread
        )
        return clearly or fastest > (1 + self.early_margin) * slowest

    def claiming(self, rounds: int, timed_s: float) -> bool:
        """Whether a leader with ``rounds`` rounds, whose pair's timed calls took ``timed_s``
        seconds, still needs rounds for its claim."""
        short = timed_s < self.claim_s and rounds < self.claim_max_rounds
        return rounds < self.claim_rounds or short

    def settled(
        self,
        samples: Mapping[K, Sequence[float]],
        eligible: Collection[K],
        claimable: Collection[K] | None = None,
        timed_s: Mapping[K, float] | None = None,
    ) -> set[K]:
        """The keys of ``samples`` whose timing can stop: beaten by an ``eligible`` key (one
        the choice may pick), or apart from every other key, except the leading
        ``claimable`` key (default: the eligible ones) while it is :meth:`claiming`, its
        pair's timed seconds read from ``timed_s`` (a key missing there: none to time, so
        only ``claim_rounds`` counts). See the module docs."""
        done = set()
        lead = self.leader(samples, eligible if claimable is None else claimable)
        spans = timed_s or {}
        for key, mine in samples.items():
            if key == lead and self.claiming(len(mine), spans.get(key, math.inf)):
                continue
            others = [(k, s) for k, s in samples.items() if k != key]
            if any(k in eligible and self.beaten(mine, s) for k, s in others) or (
                len(mine) >= self.early_rounds
                and all(self.beaten(mine, s) or self.beaten(s, mine) for _, s in others)
            ):
                done.add(key)
        return done

    @staticmethod
    def leader(samples: Mapping[K, Sequence[float]], claimable: Collection[K]) -> K | None:
        """The ``claimable`` key of ``samples`` with the lowest median: the one the choice
        would pick now (None when no claimable key has a sample)."""
        timed = [k for k in samples if k in claimable and samples[k]]
        return min(timed, key=lambda k: statistics.median(samples[k]), default=None)
