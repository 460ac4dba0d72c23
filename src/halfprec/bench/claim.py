"""deploy's claim: the chosen module's speed over eager fp32 from rounds at two moments.

A machine's speed drifts over tens of seconds, and not alike for fp32 and a half variant:
fp32 moves twice the bytes, so other tenants' use of the shared cache and memory bandwidth
(and whatever else the host does) slows it more. The race times a leader's pair over about
two seconds of calls (:class:`~halfprec.bench.race.Race`'s ``claim_s``), so its rounds hold
one moment, and their interquartile range only that moment's noise. In the first deploy of
a process fp32 ran 15-60% slower than in the same process 20-60 s later, while OpenVINO's
bf16 choice barely slowed (docs/benchmarks.md): a claim from the race's rounds alone sat
above a later re-timing by more than its range.

So deploy times the choice in a pair with fp32 again at its end, after the other
candidates were built, compiled and timed (:func:`time_again`: the same pair, the same
alternating rounds, the leader's rule for its claim: ``claim_rounds`` rounds and
``claim_s`` seconds of timed calls), and :class:`Claim` claims from both moments:

- the claimed range spans both moments' interquartile ranges (the lowest first quartile to
  the highest third quartile), so a later loop that lands in either moment's spread lies
  inside it;
- where the two ranges overlap, the claimed speedup is the median of both moments' rounds
  pooled; where they do not, it is the end's median, and the claim says that the moments
  disagree. The end is timed in the process deploy returns, the state a caller's loop runs
  in (only the caller's model and the choice alive, every other candidate built, compiled,
  timed and released); the race's rounds are taken beside those builds, compiles and
  releases, and read the ratio off an independent re-timing by -11% to +20%, short pair or
  long, where the end read it within -5% to +3% (docs/bench.md, docs/benchmarks.md).
  The lower of the two medians would claim the race's reading wherever it reads low
  (OpenVINO's choice, timed first, on BERT-base at batch 8 and Whisper's encoder: 5-11%
  under the loop's ratio). The end's samples are each the second call after the wait
  (:func:`second_call`), as a loop's calls follow their own: the first call after the wait
  differed from a loop's (eager fp32 on DeiT-small: 6% cheaper), and in one-call rounds of
  alternating order one variant's call follows the other's in 2 rounds of 3. Only a pair
  too long for the budget (:data:`SECOND_CALL_S`) keeps one-call samples;
- where the claimed range holds 1, the choice is not faster than fp32 beyond the spread of
  both moments, and deploy keeps fp32 (as it does when the race cannot rank); so it does
  where the range's low end lies within :data:`MIN_GAIN` of 1: a gain that small is
  within what an independent re-timing reads apart from deploy (BERT-base at batch 8 on
  a loaded Zen 3: claimed 1.08x, range 1.02-1.13x, where ``benchmarks/verify_choice.py``
  read 0.98x, IQR 0.94-1.03x; rounds there scatter 5-20%, docs/benchmarks.md).

Eager fp32's own cost moves with the process's memory allocator. Its activations (tens to
hundreds of MB a call on BERT-base) are freed at the end of each call, and glibc's malloc
gives the top of its heap back to the kernel once the free space there passes its trim
threshold; the next call then takes a page fault on each 4 KB page again (about 2 us of
kernel time each). Whether that happens depends on what else the process allocated after
fp32's activations: a candidate's weights left there keep the heap from shrinking. So
fp32 ran without faults while an eager bf16 candidate was alive, and with 30-60 thousand
faults a call (a few percent of its CPU time) while OpenVINO's choice was,
whose memory is its own. The half choices barely fault. The end moment's process is the
one deploy returns: only the caller's model and the choice alive. So the leader's claim
rounds are taken there (:func:`rules`: the race stops the leader after ``min_rounds``, as
every other candidate, and the end times it for ``claim_rounds``), and where the two
moments overlap, the pooled median is mostly the end's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from halfprec.batch import Batch
from halfprec.bench.interleave import CallTimer, Prepared, time_interleaved
from halfprec.bench.race import Race
from halfprec.bench.results import VariantResult
from halfprec.bench.variants import Variant
from halfprec.modules import evaluating
from halfprec.timing import Ratio, Timing, ratio_of, ratio_text

# the least gain claimed: a claimed range whose low end lies within this of 1 is too small
# to claim (see the module docs)
MIN_GAIN = 0.05

# the widest claimed range (its high end over its low end) that still establishes a speed:
# ViT-tiny's onnxruntime choice at load 15-25 claimed "721.57x, range 2.60-1136.59x", where
# an independent re-timing read 43-58x (docs/benchmarks.md, round eighteen)
WIDEST = 2.0

# how much faster than eager fp32's own kernels a choice may run the model's matrix
# products (its compiled or a runtime's kernels, fused, in its dtype at the eager GEMM
# ratio): a claim past what that allows (:func:`work_bound`) is not a speed of the work
KERNEL_SLACK = 4.0


def work_bound(gemm_s: float | None, fp32_s: float | None, kernels: float) -> float | None:
    """The most a choice can be faster than eager fp32 for the work: eager fp32's call
    (``fp32_s``, its fastest round) over the least the choice could spend in the same
    matrix products (``gemm_s``: eager fp32's seconds in them, each product's fastest
    sample; at ``kernels`` times that speed in the choice's dtype, the eager GEMM ratio,
    and :data:`KERNEL_SLACK` more), everything else taken as free. None where either is
    unknown: on a CPU where every half dtype is probed slow no GEMM limit is timed, so
    the rule never applies there (only :data:`WIDEST` does). None too where ``gemm_s``
    exceeds ``fp32_s``: a call's matrix products are part of the call, so the two timings
    disagree (one moment or clock slower than the other: a BERT-base b8 deploy at load 18,
    its rounds on the CPU clock, bounded a 2.97x OpenVINO choice at 2.1x) and bound nothing,
    as :func:`~halfprec.bench.compile_gate.gemm_share` rules."""
    if gemm_s is None or fp32_s is None or gemm_s <= 0 or fp32_s <= 0 or gemm_s > fp32_s:
        return None
    return fp32_s / (gemm_s / (max(1.0, kernels) * KERNEL_SLACK))


@dataclass(frozen=True)
class Claim:
    """The speedup deploy claims: the choice's rounds against fp32 in the race (``race``)
    and again at deploy's end (``end``; None where it was not timed again), and both
    pooled (``pooled``). See the module docs."""

    race: Ratio
    end: Ratio | None = None
    pooled: Ratio | None = None
    second: bool = False
    """Whether the end's long calls were each timed as the second call after the wait."""
    most: float | None = None
    """The most the work allows (:func:`work_bound`; None: not known)."""

    @property
    def unfounded(self) -> str | None:
        """Why the rounds establish no speed at all (None where they may): a range wider
        than :data:`WIDEST` times, or a median past what the work allows (:attr:`most`).
        A range that holds 1 is too noisy to rank, which says no speed already."""
        r = self.ratio
        if r.q1 <= 1.0:
            return None
        if r.q3 / r.q1 > WIDEST:
            return (
                f"its range spans {r.q3 / r.q1:.3g} times, more than {WIDEST:g}: the rounds "
                "disagree too much to time it (a busy machine)"
            )
        if self.most is not None and r.median > self.most:
            return (
                f"{r.median:.2f}x is more than the {self.most:.1f}x its work allows (its matrix "
                "products alone, at the eager GEMM ratio and up to "
                f"{KERNEL_SLACK:g} times eager's kernels), so its rounds did not time the work"
            )
        return None

    @property
    def agree(self) -> bool:
        """Whether the two moments' interquartile ranges overlap (True with one moment)."""
        e = self.end
        return e is None or (e.q1 <= self.race.q3 and self.race.q1 <= e.q3)

    @property
    def ratio(self) -> Ratio:
        """The claim as one :class:`~halfprec.timing.Ratio`: its median the claimed speedup,
        its ``q1``-``q3`` the claimed range (both moments' IQRs spanned), its rounds both
        moments' together."""
        e = self.end
        if e is None:
            return self.race
        median = self.pooled.median if self.agree and self.pooled is not None else e.median
        low, high = min(self.race.q1, e.q1), max(self.race.q3, e.q3)
        return Ratio(median, low, high, self.race.rounds + e.rounds)

    @property
    def faster(self) -> bool:
        """Whether the claimed range lies above 1 + :data:`MIN_GAIN` (over more than one
        round): the choice is faster than fp32 at both moments beyond their spreads, by more
        than a re-timing's drift."""
        r = self.ratio
        return r.rounds > 1 and r.q1 > 1.0 + MIN_GAIN and self.unfounded is None

    def text(self) -> str:
        """e.g. ``2.20x faster than fp32 (range 2.05-2.45x: IQR 2.20-2.45x over 16 rounds
        in the race, 2.05-2.25x over 16 rounds at deploy's end)``; ``too noisy to rank``
        where the range holds 1."""
        r, e = self.ratio, self.end
        if e is None:
            return ""
        moments = (
            f"IQR {self.race.q1:.2f}-{self.race.q3:.2f}x over {self.race.rounds} rounds in the "
            f"race, {e.q1:.2f}-{e.q3:.2f}x over {e.rounds} rounds at deploy's end"
        )
        if not self.agree:
            moments = f"the two moments disagree, the end's median claimed: {moments}"
        span = f"range {r.q1:.2f}-{r.q3:.2f}x: {moments}"
        why = self.unfounded
        if why is not None:
            return f"no speed established ({why}; median {r.median:.2f}x, {span})"
        if not self.faster and r.q1 > 1.0 and r.rounds > 1:
            small = f"its low end within {MIN_GAIN:.0%} of 1"
            return f"a gain too small to claim ({r.median:.2f}x, {span}; {small})"
        if not self.faster:
            return f"too noisy to rank ({r.median:.2f}x, {span})"
        return f"{ratio_text(r.median)} than fp32 ({span})"

    def to_json(self) -> dict[str, Any]:
        r = self.ratio
        return {
            "median": r.median,
            "low": r.q1,
            "high": r.q3,
            "rounds": r.rounds,
            "agree": self.agree,
            "second_call": self.second,
            "established": self.unfounded is None,
            "most": self.most,
            "race": self.race.to_json(),
            "end": None if self.end is None else self.end.to_json(),
        }


def rules(race: Race | None) -> tuple[Race | None, Race | None]:
    """deploy's rules for its two moments: the race's (the leader stopped after
    ``min_rounds`` rounds, as any other candidate, still until its pair's timed calls add
    up to ``claim_s``) and the end's (``race`` itself: ``claim_rounds`` rounds). The
    rounds that the leader's claim adds are taken at the end, in the process deploy
    returns (see the module docs); no more rounds are timed in all."""
    if race is None:
        return None, None
    return replace(race, claim_rounds=race.min_rounds), race


def affordable(end: Race | None, row: VariantResult) -> Race | None:
    """The end's rule for a choice whose race row is ``row``: ``claim_rounds`` rounds where
    they fit in twice ``claim_s`` of timed calls at the race's medians, else the race's
    ``min_rounds`` (still until the pair's calls add up to ``claim_s``). Long calls
    (BERT-base at batch 8: 1.5 s a pair) would otherwise add seconds past deploy's time
    budget (docs/bench.md) for two rounds."""
    pair_s = _pair_s(row)
    if end is None or pair_s is None or pair_s * end.claim_rounds <= 2 * end.claim_s:
        return end
    return replace(end, claim_rounds=end.min_rounds)


SECOND_CALL_S = 4.0
"""The end's rounds take each sample as the second call after the wait where the calls
they make (the untimed first ones too) fit in this many times ``claim_s`` at the race's
medians: 8 s by default, pairs of up to 0.8 s over ``claim_rounds`` rounds or 1.33 s over
``min_rounds`` (:func:`second_call`)."""


def second_call(end: Race | None, row: VariantResult) -> bool:
    """Whether the end times each call's sample as the second call after the wait for
    quiet (:func:`~halfprec.bench.steady.steady_call_time`'s ``second``), for a choice whose
    race row is ``row``: where the end's rounds (:func:`affordable`) with one untimed call
    of each variant more fit in :data:`SECOND_CALL_S` times ``claim_s`` at the race's
    medians. A longer pair keeps one-call samples (and no race: no budget to weigh).

    A one-call sample of a long call is the first call after the wait, and in every round
    but the first it follows the other variant's call or its own: the rounds alternate
    their order (fp32 first, then the choice first, ...), so over ``min_rounds`` (3) rounds
    one variant's sample follows the other's call in 2 of them, and the median round
    carries whatever a switch costs that variant (its threads woken, its data back in the
    caches). A second call follows its own first, as in a user's loop."""
    pair_s = _pair_s(row)
    rounds = affordable(end, row)
    return (
        rounds is not None
        and pair_s is not None
        and 2 * pair_s * rounds.claim_rounds <= SECOND_CALL_S * rounds.claim_s
    )


def _pair_s(row: VariantResult) -> float | None:
    """A pair's seconds at the race's medians: ``row``'s call and fp32's in its pair."""
    if row.timing is None or row.reference_timing is None:
        return None
    return row.timing.median + row.reference_timing.median


def time_again(
    model: nn.Module,
    chosen: nn.Module,
    row: VariantResult,
    batch: Batch,
    race: Race | None,
    runs: int,
    timer: CallTimer,
) -> tuple[Ratio, Ratio] | None:
    """The choice (``chosen``, whose race row is ``row``) timed again in a pair with eager
    fp32 (``model``, the caller's: in eval mode for the rounds, its flags given back
    after), in rounds alternating their order as in the race. With ``race``: the leader's
    rule for its claim (at least ``claim_rounds`` rounds, and until the pair's timed calls
    add up to ``claim_s``); without: ``runs`` rounds. Returns the ratio of these rounds
    and of the race's and these pooled; None where either side has no rounds."""
    fp32 = Prepared(VariantResult(Variant("fp32"), row.batch_size, "ok"), model, runs)
    again = Prepared(replace(row, timing=None, reference_timing=None), chosen, runs)
    with evaluating(model):
        samples = time_interleaved([fp32, again], batch, race, timer)
    ref, mine = samples.get(0, []), samples.get(1, [])
    if not ref or not mine or row.timing is None or row.reference_timing is None:
        return None
    rounds = min(len(ref), len(mine))
    end = ratio_of(Timing(tuple(ref[:rounds])), Timing(tuple(mine[:rounds])))
    first = min(len(row.timing.samples), len(row.reference_timing.samples))
    pooled = ratio_of(
        Timing((*row.reference_timing.samples[:first], *ref[:rounds])),
        Timing((*row.timing.samples[:first], *mine[:rounds])),
    )
    return end, pooled
