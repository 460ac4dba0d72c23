"""deploy's claim from two moments: the race's rounds and the choice timed again at deploy's
end (injected clocks only: no test here depends on the machine's speed)."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import nn

import halfprec
from halfprec import BenchConfig
from halfprec.bench import deploy as deploy_module
from halfprec.bench import runner, steady
from halfprec.bench.claim import Claim, work_bound
from halfprec.bench.deploy import Deployed
from halfprec.bench.variants import Variant
from halfprec.timing import Ratio, Stopwatch
from testbed.clocks import Advances


def _linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(16, 16)


X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
CONFIG = BenchConfig(
    warmup=1, runs=5, memory="none", skip_slower_than=None, limit=False, probe_cache=False
)


class _FirstMoment:
    """A process's first seconds, on an injected clock: fp32's calls take ``slow`` seconds
    until the clock reaches ``until``, then ``fast`` (the first deploy of a process ran
    fp32 15-60% slower than 20-60 s later, the bf16 choice barely slower); the candidate's
    take ``half`` whatever the moment, another candidate's ``other``; building a candidate
    (a conversion, a compile) takes ``build_s``. A user's loop after deploy reads
    ``fast / half``."""

    def __init__(self, fast: float, slow: float, half: float, other: float) -> None:
        self.fast, self.slow, self.half, self.other = fast, slow, half, other
        self.until, self.build_s, self.now = 20.0, 10.0, 0.0

    def settle(self) -> float:
        """The wait for quiet (:func:`halfprec.bench.steady.settle`): none here."""
        return 0.0

    def fp32(self) -> None:
        self.now += self.slow if self.now < self.until else self.fast

    def candidate(self) -> None:
        self.now += self.half

    def second(self) -> None:
        self.now += self.other

    def build(self, _model: nn.Module, variant: Variant, *_a: Any, **_k: Any) -> nn.Module:
        self.now += self.build_s
        step = self.candidate if variant == Variant("halfprec", torch.bfloat16) else self.second
        return Advances(_linear(), step)


def _deploy_on(
    machine: _FirstMoment, monkeypatch: pytest.MonkeyPatch, bench: BenchConfig = CONFIG
) -> Deployed:
    """deploy (the real runner, interleave, race, steady and claim code) of fp32 against
    halfprec-bf16, timed first, and onnxruntime-fp32, built and timed after it, on
    ``machine``'s injected clock, measured as ``bench`` says."""
    pytest.importorskip("onnxruntime")
    watch = functools.partial(Stopwatch, clock=lambda: machine.now)
    monkeypatch.setattr(steady, "Stopwatch", watch)
    monkeypatch.setattr(steady, "settle", machine.settle)
    monkeypatch.setattr(runner, "build_variant", machine.build)
    model = Advances(_linear(), machine.fp32)
    return halfprec.deploy(model, X, "bf16", compile=False, bench=bench, runtimes=("onnxruntime",))


@pytest.mark.parametrize(("fast", "slow", "half"), [(0.40, 0.52, 0.12), (0.010, 0.013, 0.004)])
def test_a_claim_made_while_fp32_runs_slow_covers_the_ratio_a_later_loop_reads(
    fast: float, slow: float, half: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fp32 is 30% slower while the race times the choice's pair, and back to its speed
    by deploy's end: the claim's range holds the later loop's ratio, its median is the
    end's, and the summary says the moments disagree. From the race's rounds
    alone (before the choice was timed again at the end), deploy claimed ``slow / half``
    with a spread of nothing, above any later re-timing."""
    machine = _FirstMoment(fast, slow, half, other=fast * 0.9)
    done = _deploy_on(machine, monkeypatch)
    assert done.variant == "halfprec-bf16"
    assert done.claim is not None and done.claim.end is not None
    loop = fast / half
    assert done.claim.race.q1 > loop * 1.2  # the premise: the race timed the slow moment only
    claimed = done.claim.ratio
    assert claimed.q1 <= loop * (1 + 1e-9) and loop <= claimed.q3 * (1 + 1e-9), (claimed, loop)
    assert done.speedup == pytest.approx(loop)
    assert not done.claim.agree and "the two moments disagree" in done.summary
    assert done.seconds["re-timing"] >= 0.0 and "re-timing" in done.cpu_spent
    assert done.to_json()["claim"]["low"] == pytest.approx(loop)


def test_a_steady_machine_claims_what_the_race_read_from_both_moments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing drifts: both moments read ``fast / half``, they agree, and the claim is
    that ratio over the rounds of both (at least the race's min_rounds at the end)."""
    machine = _FirstMoment(0.5, 0.5, 0.125, other=0.375)  # exact in binary: no rounding
    done = _deploy_on(machine, monkeypatch)
    assert done.claim is not None and done.claim.end is not None and done.claim.agree
    assert done.speedup == 4.0
    # the race times the leader for its min_rounds (3), and on until its pair's calls add
    # up to claim_s (2 s: 4 rounds of 0.625 s); claim_rounds (5) are taken at the end, in
    # the process deploy returns
    assert (done.claim.race.rounds, done.claim.end.rounds) == (4, 5)
    assert done.claim.ratio.rounds == done.claim.race.rounds + done.claim.end.rounds
    assert "4.00x faster than fp32 (range 4.00-4.00x" in done.summary


def test_long_calls_are_timed_again_for_the_race_s_min_rounds_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pair of calls takes 1.5 s (BERT-base at batch 8 takes about that): the end's
    claim_rounds (5) would time 7.5 s, past twice claim_s, so the end times min_rounds (3);
    a pair of 0.625 s (above) gets its 5."""
    machine = _FirstMoment(1.0, 1.0, 0.5, other=1.5)
    done = _deploy_on(machine, monkeypatch)
    assert done.claim is not None and done.claim.end is not None
    assert (done.claim.race.rounds, done.claim.end.rounds) == (3, 3)
    assert done.speedup == 2.0


def test_a_close_rival_is_timed_for_min_rounds_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rival 4% behind the leader is neither beaten nor apart after min_rounds (3), and
    more rounds, which only widen the extremes the race compares, never make it so: deploy's
    own measurement plans min_rounds per candidate, so the rival stops there (it ran 5, two
    rounds of its pair more, 3 s here and on BERT-base at batch 8), and the leader still
    runs until its claim's seconds."""
    machine = _FirstMoment(1.0, 1.0, 0.5, other=0.52)
    quick = replace(deploy_module._quick(), skip_slower_than=None, limit=False, probe_cache=False)
    done = _deploy_on(machine, monkeypatch, quick)
    rival = done.report.get("onnxruntime-fp32")
    assert done.variant == "halfprec-bf16" and rival.timing is not None
    assert len(rival.timing.samples) == 3
    assert done.claim is not None and done.claim.race.rounds == 3


class _Allocator(_FirstMoment):
    """fp32's calls cost what eager fp32 costs with the process's allocator in two states:
    until ``until`` (the race, with OpenVINO's choice beside it) its freed activations are
    given back to the kernel and faulted in again on each call, 4% slower; after it
    (deploy's end, and the process deploy returns) another allocation above them keeps them
    on the heap. Both vary from call to call (``spread``), so the two moments' ranges
    overlap."""

    spread = (1.0, 0.94, 1.06, 0.97, 1.03)

    def __init__(self) -> None:
        super().__init__(fast=0.50, slow=0.52, half=0.25, other=0.60)
        self.calls = 0

    def fp32(self) -> None:
        base = self.slow if self.now < self.until else self.fast
        self.now += base * self.spread[self.calls % len(self.spread)]
        self.calls += 1


def test_where_the_moments_overlap_the_claim_is_mostly_the_process_deploy_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fp32 runs 4% slower in the race than in the process deploy returns (its allocator
    state: see the claim's module docs), within its call-to-call spread. The moments
    agree, and the pooled median is drawn mostly from the end's rounds, so it lies within
    the end's range, below the race's median; from 5 rounds in the race and 3 at the end
    it was 2.04x, above the end's range (1.97-2.03x)."""
    machine = _Allocator()
    done = _deploy_on(machine, monkeypatch)
    assert done.variant == "halfprec-bf16"
    claim = done.claim
    assert claim is not None and claim.end is not None and claim.agree, claim
    assert claim.end.rounds > claim.race.rounds
    assert claim.end.q1 <= done.speedup <= claim.end.q3, claim
    assert done.speedup < claim.race.median


def test_fp32_chosen_claims_nothing_and_is_not_timed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    machine = _FirstMoment(0.10, 0.10, 0.30, other=0.40)
    done = _deploy_on(machine, monkeypatch)
    assert done.variant == "fp32" and done.claim is None
    assert "re-timing" not in done.seconds


def test_a_choice_the_later_moment_finds_no_faster_is_overruled_by_fp32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In the race fp32 runs slow and the candidate looks 1.16x faster; at deploy's end it
    is 0.89x: the claimed range holds 1, so deploy keeps fp32 (a fresh copy) and says why,
    as it does when the race cannot rank."""
    machine = _FirstMoment(0.40, 0.52, 0.45, other=0.60)
    done = _deploy_on(machine, monkeypatch)
    assert done.report.get("halfprec-bf16").speedup == pytest.approx(0.52 / 0.45)
    assert done.variant == "fp32" and done.claim is None and done.speedup == 1.0
    assert "halfprec-bf16 timed again at deploy's end: too noisy to rank" in done.summary
    assert done.summary.endswith("fp32 kept") and done.overruled in done.report.warnings


class _FirstCallCheap(_FirstMoment):
    """fp32's first call after each wait for quiet takes 6% less than its next calls, which
    a user's loop reads (eager fp32 on DeiT-small, two threads); the candidates' calls cost
    the same whenever they run."""

    def __init__(self, fast: float, half: float, other: float) -> None:
        super().__init__(fast, fast, half, other)
        self.waited = False

    def settle(self) -> float:
        self.waited = True
        return 0.0

    def fp32(self) -> None:
        self.now += self.fast * (0.94 if self.waited else 1.0)
        self.waited = False

    def candidate(self) -> None:
        super().candidate()
        self.waited = False

    def second(self) -> None:
        super().second()
        self.waited = False


def test_a_short_pair_is_timed_again_by_the_second_call_after_each_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pair of 0.375 s (5 rounds with one untimed call of each more fit in twice
    claim_s): the end times each sample as the second call after the wait, so it reads the
    loop's 2x, and deploy claims the end's median (the race, still timed by the first call
    after the wait, reads 1.88x). Timed that way at the end too, the claim was 1.88x
    (1.88-1.88x), under the loop's."""
    machine = _FirstCallCheap(0.25, 0.125, other=0.1875)
    done = _deploy_on(machine, monkeypatch)
    claim = done.claim
    assert done.variant == "halfprec-bf16" and claim is not None and claim.end is not None
    loop = 0.25 / 0.125
    assert claim.race.median == pytest.approx(loop * 0.94)  # the race's one-call samples
    assert claim.end.median == pytest.approx(loop) and claim.second
    assert claim.ratio.q1 <= loop <= claim.ratio.q3 * (1 + 1e-9), claim.ratio
    assert done.speedup == pytest.approx(loop)  # the end's median, not the race's lower one
    assert "the end's median claimed" in done.summary
    assert done.to_json()["claim"]["second_call"] is True


def test_a_long_pair_keeps_one_call_samples_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pair of 1.5 s: one more call per variant per round would cost 1.5 s a round (9 s
    over the end's 3 rounds, past :data:`~halfprec.bench.claim.SECOND_CALL_S`), so the end
    times the first call after the wait (docs/bench.md says so): it reads 6% low."""
    machine = _FirstCallCheap(1.0, 0.5, other=1.5)
    done = _deploy_on(machine, monkeypatch)
    assert done.claim is not None and done.claim.end is not None
    assert done.claim.end.median == pytest.approx(2.0 * 0.94) and not done.claim.second


class _ChoiceSlowInTheRace(_FirstMoment):
    """The choice's calls take 12% longer until ``until`` (the race) than after it (deploy's
    end, and the process deploy returns); fp32's cost the same throughout. Quietly, the
    race read OpenVINO's choice on Whisper-base's encoder (30 s of audio: fp32 0.56 s, the
    choice 0.23 s a call) 2.17x, deploy's end 2.43x and a loop after deploy 2.43x."""

    def candidate(self) -> None:
        self.now += self.half * (1.12 if self.now < self.until else 1.0)


def test_a_long_pair_the_race_reads_low_claims_what_the_end_and_a_loop_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pair of 0.79 s (the race's one-call samples; the end's the second call after
    each wait) whose race reads the choice slow: the moments disagree, and deploy claims the end's
    median, the loop's ratio, with the range still spanning both moments. It claimed the
    lower median, the race's 2.17x, 11% under the loop's."""
    machine = _ChoiceSlowInTheRace(0.56, 0.56, 0.23, other=0.5)
    done = _deploy_on(machine, monkeypatch)
    claim = done.claim
    assert done.variant == "halfprec-bf16" and claim is not None and claim.end is not None
    loop = 0.56 / 0.23
    assert claim.race.median == pytest.approx(loop / 1.12)  # premise
    assert claim.end.median == pytest.approx(loop) and not claim.agree
    assert done.speedup == pytest.approx(loop)
    assert claim.ratio.q1 == pytest.approx(loop / 1.12) and claim.ratio.q3 == pytest.approx(loop)
    assert "the two moments disagree, the end's median claimed" in done.summary
    assert done.to_json()["claim"]["median"] == pytest.approx(loop)


def _r(median: float, q1: float, q3: float, rounds: int = 5) -> Ratio:
    return Ratio(median, q1, q3, rounds)


def test_the_claim_spans_both_moments_and_claims_the_end_where_they_disagree() -> None:
    agree = Claim(_r(2.4, 2.3, 2.5), _r(2.2, 2.1, 2.35), pooled=_r(2.3, 2.2, 2.45, 10))
    assert agree.agree
    assert (agree.ratio.median, agree.ratio.q1, agree.ratio.q3) == (2.3, 2.1, 2.5)
    assert agree.ratio.rounds == 10
    apart = Claim(_r(2.6, 2.5, 2.7), _r(2.2, 2.1, 2.3), pooled=_r(2.45, 2.2, 2.6, 10))
    assert not apart.agree
    assert (apart.ratio.median, apart.ratio.q1, apart.ratio.q3) == (2.2, 2.1, 2.7)
    assert "the two moments disagree, the end's median claimed" in apart.text()
    assert "range 2.10-2.70x" in apart.text()
    later_higher = Claim(_r(2.2, 2.1, 2.3), _r(2.6, 2.5, 2.7), pooled=_r(2.45, 2.2, 2.6, 10))
    assert later_higher.ratio.median == 2.6  # the end's, however the end's calls were timed
    assert (later_higher.ratio.q1, later_higher.ratio.q3) == (2.1, 2.7)
    assert replace(later_higher, second=True).ratio == later_higher.ratio
    noisy = Claim(_r(1.3, 1.1, 1.5), _r(1.0, 0.9, 1.1), pooled=_r(1.1, 1.0, 1.4, 10))
    assert noisy.text().startswith("too noisy to rank") and not noisy.faster
    slower_in_race = Claim(_r(0.9, 0.8, 0.95), _r(2.0, 1.9, 2.1), pooled=_r(1.5, 0.9, 2.0, 10))
    assert slower_in_race.ratio.median == 2.0 and not slower_in_race.faster  # range holds 1
    alone = Claim(_r(2.4, 2.3, 2.5))
    assert alone.ratio == alone.race and alone.agree


class _SwitchCost(_FirstMoment):
    """The choice's call takes ``cost`` longer when the call before it was fp32's (a switch:
    its threads woken, its data back in the caches); fp32's calls and a call after its own
    cost the same. A user's loop calls the choice after itself and reads ``fast / half``."""

    def __init__(self, fast: float, half: float, other: float, cost: float) -> None:
        super().__init__(fast, fast, half, other)
        self.cost, self.last = cost, ""

    def fp32(self) -> None:
        super().fp32()
        self.last = "fp32"

    def candidate(self) -> None:
        self.now += self.half * (1 + self.cost if self.last == "fp32" else 1.0)
        self.last = "choice"

    def second(self) -> None:
        super().second()
        self.last = "other"


@pytest.mark.parametrize(("fast", "half"), [(0.5, 0.25), (0.6, 0.24)])
def test_a_long_pair_s_samples_do_not_carry_the_switch_to_the_choice(
    fast: float, half: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pair of 0.75-0.84 s (BERT-base at batch 8, wav2vec2-base on 10 s of audio), whose
    choice pays 25% on a call right after fp32's. The rounds alternate their order (fp32
    first, then the choice first, ...), so over 3 rounds the choice's one-call sample
    follows fp32's call in 2 of them, and the median carries the whole switch: the end
    read ``loop / 1.25`` and deploy claimed it (range 1.60-1.80x where the loop reads
    2.00x). Timed as the second call after each wait, the end reads the loop's ratio and
    deploy claims it."""
    machine = _SwitchCost(fast, half, other=fast * 1.5, cost=0.25)
    done = _deploy_on(machine, monkeypatch)
    claim = done.claim
    assert done.variant == "halfprec-bf16" and claim is not None and claim.end is not None
    loop = fast / half
    assert claim.race.median == pytest.approx(loop / 1.25)  # premise: the race's 2 in 3
    assert claim.end.median == pytest.approx(loop) and claim.second
    assert done.speedup == pytest.approx(loop)
    assert claim.ratio.q1 <= loop <= claim.ratio.q3 * (1 + 1e-9), claim.ratio


def test_a_gain_within_the_drift_of_a_re_timing_is_not_claimed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The candidate is 1.04x faster in every round at both moments: ranked above 1, but
    within the 5% an independent re-timing reads apart from deploy (BERT-base b8's
    fp32+compile claimed 1.08x, range 1.02-1.13x, re-timed 0.98x). fp32 is kept, and the
    summary says the gain was too small, not that the machine was noisy."""
    machine = _FirstMoment(0.40, 0.40, 0.385, other=0.60)
    done = _deploy_on(machine, monkeypatch)
    assert done.report.get("halfprec-bf16").speedup == pytest.approx(0.40 / 0.385)
    assert done.variant == "fp32" and done.claim is None and done.speedup == 1.0
    assert "halfprec-bf16 timed again at deploy's end: a gain too small to claim" in done.summary
    assert "its low end within 5% of 1" in done.summary and done.summary.endswith("fp32 kept")


def test_a_claim_whose_range_clears_the_least_gain_is_faster() -> None:
    small = Claim(Ratio(1.08, 1.02, 1.13, 3), Ratio(1.08, 1.07, 1.10, 3), Ratio(1.08, 1.05, 1.1, 6))
    assert not small.faster and small.text().startswith("a gain too small to claim (1.08x")
    clear = Claim(Ratio(1.25, 1.14, 1.49, 3), Ratio(1.23, 1.21, 1.25, 3), Ratio(1.24, 1.2, 1.3, 6))
    assert clear.faster and clear.text().startswith("1.24x faster than fp32 (range 1.14-1.49x")
    noisy = Claim(Ratio(1.05, 0.97, 1.13, 3), Ratio(1.02, 0.99, 1.04, 3), Ratio(1.03, 0.98, 1.1, 6))
    assert not noisy.faster and noisy.text().startswith("too noisy to rank")


def test_a_claim_wider_than_twice_or_past_the_work_establishes_no_speed() -> None:
    """ViT-tiny's onnxruntime choice at load 15-25: "721.57x faster (range 2.60-1136.59x)",
    where a re-timing apart read 43-58x. A range that wide, or a median past what the
    model's matrix products allow, is no speed: deploy keeps fp32 and says why."""
    wide = Claim(
        Ratio(900.0, 2.6, 1136.59, 3),
        end=Ratio(721.57, 600.0, 800.0, 5),
        pooled=Ratio(721.57, 2.6, 1136.59, 8),
    )
    assert not wide.faster and wide.unfounded is not None
    assert wide.text().startswith("no speed established (its range spans 437 times, more than 2")
    assert "721.57x than fp32" not in wide.text() and not wide.to_json()["established"]
    # eager fp32's call spends half its time in matrix products at eager kernels: no
    # choice in fp32 is more than 8x faster (4x better kernels, the rest free)
    most = work_bound(gemm_s=0.5, fp32_s=1.0, kernels=1.0)
    assert most == pytest.approx(8.0)
    tight = Ratio(40.0, 38.0, 42.0, 5)
    past = Claim(tight, end=tight, pooled=Ratio(40.0, 38.0, 42.0, 10), most=most)
    assert not past.faster and "40.00x is more than the 8.0x its work allows" in past.text()
    # a bf16 choice at an eager GEMM ratio of 4 may be 32x faster: 1.30x and 6x are claims
    assert work_bound(0.5, 1.0, kernels=4.0) == pytest.approx(32.0)
    for median in (1.30, 6.0):
        r = Ratio(median, median * 0.95, median * 1.08, 5)
        fine = Claim(r, end=r, pooled=Ratio(median, median * 0.95, median * 1.08, 10), most=most)
        assert fine.faster and fine.unfounded is None
        assert fine.text().startswith(f"{median:.2f}x faster than fp32")
    assert work_bound(None, 1.0, 1.0) is None  # the limits timed nothing: no bound


def test_matrix_products_timed_longer_than_the_call_bound_nothing() -> None:
    """A call's matrix products are part of it, so products timed longer than the whole
    call say the two timings disagree (another moment or clock): a BERT-base b8 deploy at
    load 18 bounded its 2.97x OpenVINO bf16 choice at 2.1x that way and kept fp32, where
    a re-timing apart read about 3x. Such timings draw no bound."""
    assert work_bound(gemm_s=1.2, fp32_s=1.0, kernels=1.33) is None
    r = Ratio(2.97, 2.54, 3.08, 3)
    claim = Claim(r, end=r, pooled=Ratio(2.97, 2.54, 3.08, 6), most=work_bound(1.2, 1.0, 1.33))
    assert claim.faster and claim.unfounded is None
    assert work_bound(gemm_s=1.0, fp32_s=1.0, kernels=1.0) == pytest.approx(4.0)  # all GEMMs
