"""Racing: a variant stops being timed once its rank is settled, never on one noisy reading
(scripted timings only: no test here depends on the machine's speed)."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.bench import runner, steady
from halfprec.bench.race import Race
from halfprec.bench.results import fastest_variant
from halfprec.bench.spread import variant_speed
from halfprec.bench.variants import Variant
from halfprec.timing import Ratio, Stopwatch
from testbed.clocks import Advances


def test_a_clearly_slower_variant_is_settled_after_min_rounds_not_before() -> None:
    race = Race(min_rounds=3)
    fast, slow = [1.0, 1.1, 1.0], [1.5, 1.6, 1.55]  # 1.5x: more than 10%, less than 2x
    assert not race.beaten(slow[:2], fast[:2])  # two rounds are not enough
    assert race.beaten(slow, fast) and not race.beaten(fast, slow)
    # the leader ("fast", the one the choice would pick) runs on for its claim's rounds
    assert race.settled({"fast": fast, "slow": slow}, eligible={"fast"}) == {"slow"}
    assert race.settled({"fast": fast, "slow": slow}, eligible=set()) == {"fast", "slow"}


def test_a_variant_far_apart_is_settled_after_early_rounds_not_before() -> None:
    race = Race(min_rounds=3, early_rounds=2, early_margin=1.0)
    fast, slow = [1.0, 1.1], [5.0, 5.2]  # over twice as slow in every call
    assert not race.beaten(slow[:1], fast[:1])  # one round is never enough
    assert race.beaten(slow, fast) and not race.beaten(fast, slow)
    assert race.settled({"fast": fast, "slow": slow}, eligible={"fast"}) == {"slow"}
    # one slow reading of the faster variant puts the early verdict off to min_rounds
    assert not race.beaten(slow, [1.0, 2.7])
    assert Race(early_rounds=3).settled({"fast": fast, "slow": slow}, {"fast"}) == set()


def test_a_variant_clearly_behind_on_steady_rounds_is_settled_after_early_rounds() -> None:
    """1.4 times slower than the leader (BERT-base b8's eager bf16 beside OpenVINO's bf16,
    relative to fp32's calls), its rounds and the leader's each agreeing within 2-3%: the
    gap is far beyond both spreads, so 2 rounds settle it (the 2x early margin alone waits
    for min_rounds, a round of a 1.6 s pair more)."""
    race = Race()
    lead, behind = [0.42, 0.43], [0.59, 0.60]
    assert race.beaten(behind, lead) and not race.beaten(lead, behind)
    assert race.settled({"lead": lead, "behind": behind}, eligible={"lead"}) == {"behind"}
    # the same medians with rounds scattered as widely as the gap (load): min_rounds
    assert not race.beaten([0.55, 0.70], [0.38, 0.48])
    # beyond the spreads but within the margin (10%): a close rival, never early
    assert not race.beaten([1.08, 1.081], [1.0, 1.0])
    # one round is never enough, however steady
    assert not race.beaten(behind[:1], lead[:1])
    # early_spreads=inf leaves the 2x early margin only
    assert not Race(early_spreads=float("inf")).beaten(behind, lead)


def test_close_variants_stay_in_the_race() -> None:
    samples = {"a": [1.0, 1.02, 0.99], "b": [1.05, 1.04, 1.06]}
    assert Race().settled(samples, eligible={"a", "b"}) == set()


def test_only_a_variant_the_choice_may_pick_beats_another() -> None:
    # "fast" is out of tolerance: it settles its own rank (apart from both) but cannot push
    # "b" out of the race, which is still close to the accurate "a"
    samples = {"a": [1.0, 1.0, 1.0], "b": [1.05, 1.05, 1.05], "fast": [0.1, 0.1, 0.1]}
    assert Race().settled(samples, eligible={"a", "b"}) == {"fast"}
    # a slow variant beaten only by the ineligible one, and close to nothing: apart
    samples["slow"] = [0.5, 0.5, 0.5]
    assert Race().settled(samples, eligible={"a", "b"}) == {"fast", "slow"}


def test_the_leader_runs_its_claim_rounds_however_far_ahead() -> None:
    """The variant the choice would pick is the one whose speedup is claimed, with the
    interquartile range of its rounds: it is not stopped before ``claim_rounds``."""
    race = Race(claim_rounds=5)
    fp32 = [1.0] * 5
    lead = [0.3, 0.31, 0.29, 0.3, 0.3]  # over 3x faster: apart from fp32 after 2 rounds
    for rounds in range(2, 5):
        samples = {"fp32": fp32[:rounds], "lead": lead[:rounds]}
        assert race.settled(samples, eligible={"fp32", "lead"}) == {"fp32"}
    assert race.settled({"fp32": fp32, "lead": lead}, {"fp32", "lead"}) == {"fp32", "lead"}
    assert Race.leader({"fp32": fp32, "lead": lead}, {"fp32"}) == "fp32"
    assert Race.leader({"fp32": [], "lead": []}, {"fp32", "lead"}) is None


def test_race_rejects_settings_that_cannot_rank() -> None:
    with pytest.raises(ValueError, match=r"Race\(min_rounds=1\): a rank needs at least 2"):
        Race(min_rounds=1)
    with pytest.raises(ValueError, match=r"Race\(margin=-0.1, early_spreads=2.0\): both must"):
        Race(margin=-0.1)
    with pytest.raises(ValueError, match=r"Race\(margin=0.1, early_spreads=-1\): both must"):
        Race(early_spreads=-1)
    with pytest.raises(ValueError, match=r"Race\(early_rounds=1\): a rank needs at least 2"):
        Race(early_rounds=1)
    with pytest.raises(ValueError, match=r"early verdict needs at most min_rounds=3 rounds"):
        Race(early_rounds=4)
    with pytest.raises(ValueError, match=r"Race\(early_rounds=2, early_margin=0.05\)"):
        Race(early_margin=0.05)
    with pytest.raises(ValueError, match=r"Race\(claim_rounds=2\): the leader's claim needs"):
        Race(claim_rounds=2)


@given(
    true_a=st.floats(0.001, 10.0),
    slower_by=st.floats(1.0, 100.0),
    rounds=st.integers(2, 12),
    hit_a=st.integers(0, 11),
    hit_b=st.integers(0, 11),
    burst_a=st.floats(1.0, 1000.0),
    burst_b=st.floats(1.0, 1000.0),
)
def test_one_noisy_reading_never_settles_a_variant_that_is_not_slower(
    true_a: float,
    slower_by: float,
    rounds: int,
    hit_a: int,
    hit_b: int,
    burst_a: float,
    burst_b: float,
) -> None:
    # "a" truly runs true_a per call, "b" slower_by times longer; load slows one call of each
    # by any factor. The faster "a" is never beaten, and the two are never called apart
    # unless "b" truly is slower by more than the margin (after 2 rounds too: the early
    # verdict needs the margin, and a burst widens the spread it is scaled by).
    a = [true_a] * rounds
    b = [true_a * slower_by] * rounds
    a[hit_a % rounds] *= burst_a
    b[hit_b % rounds] *= burst_b
    race = Race()
    margin = race.margin
    assert not race.beaten(a, b)
    if race.beaten(b, a):
        assert slower_by > 1 + margin
    assert "a" not in race.settled({"a": a, "b": b}, eligible={"b"}) or slower_by > 1 + margin


class Scripted:
    """Times each variant's timed calls from a script by name (the call itself runs)."""

    def __init__(self, script: dict[str, Callable[[int], float]]) -> None:
        self.script = script
        self.calls: Counter[str] = Counter()

    def __call__(self, fn: Callable[[], object], variant: Variant) -> float:
        fn()
        n = self.calls[variant.name]
        self.calls[variant.name] += 1
        return self.script[variant.name](n)


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
TEN = BenchConfig(warmup=1, runs=10, memory="none", skip_slower_than=None, limit=False)


def test_benchmark_stops_timing_a_settled_variant_and_keeps_the_close_ones() -> None:
    clock = Scripted(
        {
            "fp32": lambda n: 1.0,
            "halfprec-bf16": lambda n: 1.02,  # close to fp32: the race goes the distance
            "naive-bf16": lambda n: 5.0,  # far slower than the accurate fp32: 2 rounds
        }
    )
    result = benchmark(Tiny(), X, variants=["halfprec-bf16", "naive-bf16"], bench=TEN, timer=clock)
    runs = {r.name: len(r.timing.samples) for r in result.results if r.timing}
    # fp32 is timed in each candidate's pair, and its row pools them: 10 + 2 calls
    assert runs == {"fp32": 12, "halfprec-bf16": 10, "naive-bf16": 2}
    assert clock.calls == runs  # every timed call went through the timer
    # without racing every variant runs --runs times (fp32 in each of the two pairs)
    clock = Scripted(clock.script)
    plain = benchmark(
        Tiny(),
        X,
        variants=["halfprec-bf16", "naive-bf16"],
        bench=BenchConfig(**{**TEN.__dict__, "race": None}),
        timer=clock,
    )
    assert {r.name: len(r.timing.samples) for r in plain.results if r.timing} == {
        "fp32": 20,
        "halfprec-bf16": 10,
        "naive-bf16": 10,
    }


def test_a_candidate_clearly_behind_on_steady_rounds_stops_after_two() -> None:
    # 1.4x the leader's time relative to fp32 in every round, no spread: 2 rounds, not 3
    clock = Scripted(
        {"fp32": lambda n: 1.0, "halfprec-bf16": lambda n: 0.42, "naive-bf16": lambda n: 0.6}
    )
    benchmark(Tiny(), X, variants=["halfprec-bf16", "naive-bf16"], bench=TEN, timer=clock)
    assert clock.calls["naive-bf16"] == 2


def test_fp32_stops_when_no_other_variant_is_timed() -> None:
    # halfprec-bf16 is settled faster than fp32 after 3 rounds (over twice as fast: after
    # 2), but it leads, so it runs the race's claim_rounds (5) for its speedup's spread;
    # then nothing is left to pair fp32 with
    for seconds in (0.6, 0.4):
        clock = Scripted({"fp32": lambda n: 1.0, "halfprec-bf16": lambda n, s=seconds: s})
        result = benchmark(Tiny(), X, variants=["halfprec-bf16"], bench=TEN, timer=clock)
        assert clock.calls == {"fp32": 5, "halfprec-bf16": 5}
        assert fastest_variant(result).name == "halfprec-bf16"
    # fp32 alone (every half dtype skipped) is timed for the race's min_rounds
    alone = Scripted({"fp32": lambda n: 1.0})
    slow = BenchConfig(**{**TEN.__dict__, "skip_slower_than": 1e-9})
    benchmark(Tiny(), X, variants=["halfprec-bf16"], bench=slow, timer=alone)
    assert alone.calls == {"fp32": 3}


def test_a_leading_runtime_target_runs_the_claim_rounds() -> None:
    """deploy may pick a runtime target over the torch variants and claim its speedup: when
    it leads, it runs claim_rounds though it is no choosable way (it stopped after 2)."""
    pytest.importorskip("openvino")
    clock = Scripted(
        {"fp32": lambda n: 1.0, "halfprec-bf16": lambda n: 0.9, "openvino-fp32": lambda n: 0.3}
    )
    result = benchmark(
        Tiny(), X, variants=["halfprec-bf16", "openvino-fp32"], bench=TEN, timer=clock
    )
    assert clock.calls["openvino-fp32"] == 5
    assert result.get("openvino-fp32").accurate


def test_a_burst_on_one_reading_does_not_drop_the_faster_variant() -> None:
    # halfprec-bf16 is 2x faster, but its first timed call was hit by load (50x): a rule that
    # trusted one reading would drop it; the race keeps timing it and it wins
    clock = Scripted({"fp32": lambda n: 1.0, "halfprec-bf16": lambda n: 50.0 if n == 0 else 0.5})
    result = benchmark(Tiny(), X, variants=["halfprec-bf16"], bench=TEN, timer=clock)
    assert clock.calls["halfprec-bf16"] == clock.calls["fp32"] > 3
    assert fastest_variant(result).name == "halfprec-bf16"


class _Drifting:
    """A machine whose speed drifts over seconds, on an injected clock: fp32's calls take
    ``fast`` seconds for ``period`` seconds, then ``slow`` for as long, and so on (other
    tenants' use of the cache and memory come and go); the candidate's take ``half``
    whatever the moment. A user's loop sees fp32 at the mean of both, over the mean
    ratio's worth of seconds."""

    def __init__(self, fast: float, slow: float, half: float, period: float) -> None:
        self.fast, self.slow, self.half, self.period = fast, slow, half, period
        self.now = 0.0

    def fp32(self) -> None:
        self.now += self.slow if int(self.now / self.period) % 2 else self.fast

    def candidate(self) -> None:
        self.now += self.half


def _claim_on(machine: _Drifting | _CarriesOver, monkeypatch: pytest.MonkeyPatch) -> Ratio:
    """The speedup a benchmark of fp32 and halfprec-bf16 claims (5 planned rounds, the real
    runner, interleave, race and steady code) on ``machine``'s injected clock."""
    watch = functools.partial(Stopwatch, clock=lambda: machine.now)
    monkeypatch.setattr(steady, "Stopwatch", watch)
    monkeypatch.setattr(steady, "settle", lambda: 0.0)
    monkeypatch.setattr(
        runner, "build_variant", lambda *a, **k: Advances(Tiny(), machine.candidate)
    )
    config = BenchConfig(warmup=1, runs=5, memory="none", skip_slower_than=None, limit=False)
    result = benchmark(Advances(Tiny(), machine.fp32), X, variants=["halfprec-bf16"], bench=config)
    claim = variant_speed(result, result.get("halfprec-bf16"))
    assert claim is not None
    return claim


@pytest.mark.parametrize(("fast", "slow", "half"), [(0.010, 0.013, 0.004), (0.04, 0.05, 0.03)])
def test_the_claims_spread_covers_a_speed_that_drifts_over_seconds(
    fast: float, slow: float, half: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's rounds span the race's claim_s of timed calls, so the claimed spread
    holds the ratio a user's loop gets on a machine whose speed drifts over seconds; five
    rounds of 20 ms blocks (or single calls) all fell in one second and claimed that moment's ratio
    with a spread of nothing (as deploy claimed MiniLM 3.83x, IQR 3.80-3.85x, where 12
    pairs of blocks over 10 s read 4.12x)."""
    machine = _Drifting(fast, slow, half, period=1.0)
    claim = _claim_on(machine, monkeypatch)
    loop = (fast + slow) / 2 / half  # fp32's mean over the drift, against the candidate's
    assert claim.q1 <= loop <= claim.q3, (claim, loop)
    assert claim.rounds <= Race().claim_max_rounds


class _CarriesOver:
    """A machine where one call leaves something behind for the next, past the wait for
    quiet (a runtime's threads pinned or parked on a core, its data in the caches), on an
    injected clock: fp32's call takes ``slow`` seconds right after the candidate's, and
    ``fast`` after its own; the candidate's take ``half``. A user's loop calls fp32 after
    fp32: its ratio is ``fast / half``."""

    def __init__(self, fast: float, slow: float, half: float) -> None:
        self.fast, self.slow, self.half = fast, slow, half
        self.now, self.last = 0.0, "fp32"

    def fp32(self) -> None:
        self.now += self.slow if self.last == "candidate" else self.fast
        self.last = "fp32"

    def candidate(self) -> None:
        self.now += self.half
        self.last = "candidate"


@pytest.mark.parametrize(("fast", "slow", "half"), [(0.40, 0.48, 0.12), (0.010, 0.012, 0.004)])
def test_the_claims_spread_covers_what_one_variants_call_leaves_for_the_next(
    fast: float, slow: float, half: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pair's rounds alternate their order, so an after-effect that outlasts the wait for
    quiet falls on each variant in half the rounds; in a fixed order (fp32, then the
    candidate) every fp32 sample but the first came right after the candidate's call, and
    the claim read ``slow / half`` with a spread of nothing (as deploy claimed GPT-2 3.59x,
    IQR 3.33-3.73x, where 12 pairs of blocks of calls after warm-up read 3.12x). The
    short case held on the old order too: a short call's sample follows 5 ms of untimed
    calls of its own variant, so only a long call's sample is the first after the switch."""
    machine = _CarriesOver(fast, slow, half)
    claim = _claim_on(machine, monkeypatch)
    loop = fast / half
    assert claim.q1 <= loop * (1 + 1e-9) and loop <= claim.q3 * (1 + 1e-9), (claim, loop)


def test_the_leader_runs_until_its_pairs_timed_calls_span_claim_s() -> None:
    """Short calls: a round's two samples count a 20 ms block each (BLOCK_S), so the leader
    and fp32 run 2 s / 40 ms = 50 rounds, past the 10 planned; a slower call counts its
    own length; the cap is claim_max_rounds; --no-race keeps the planned rounds."""
    script = {"fp32": lambda n: 0.010, "halfprec-bf16": lambda n: 0.004}
    clock = Scripted(script)
    benchmark(Tiny(), X, variants=["halfprec-bf16"], bench=TEN, timer=clock)
    assert clock.calls == {"fp32": 50, "halfprec-bf16": 50}
    slower = Scripted({"fp32": lambda n: 0.25, "halfprec-bf16": lambda n: 0.10})
    benchmark(Tiny(), X, variants=["halfprec-bf16"], bench=TEN, timer=slower)
    assert slower.calls == {"fp32": 6, "halfprec-bf16": 6}  # 6 x 0.35 s >= 2 s, 5 x < 2 s
    capped = Scripted(script)
    race = Race(claim_s=100.0, claim_max_rounds=12)
    benchmark(
        Tiny(),
        X,
        variants=["halfprec-bf16"],
        bench=BenchConfig(**{**TEN.__dict__, "race": race}),
        timer=capped,
    )
    assert capped.calls == {"fp32": 12, "halfprec-bf16": 12}
    plain = Scripted(script)
    config = BenchConfig(**{**TEN.__dict__, "race": None})
    benchmark(Tiny(), X, variants=["halfprec-bf16"], bench=config, timer=plain)
    assert plain.calls == {"fp32": 10, "halfprec-bf16": 10}


def test_a_candidate_that_does_not_lead_keeps_its_planned_rounds() -> None:
    """Only the leader's claim needs the seconds: an accurate candidate close behind it
    (5% slower, so never beaten) runs its planned rounds (10) and stops."""
    clock = Scripted(
        {
            "fp32": lambda n: 0.010,
            "halfprec-bf16": lambda n: 0.004,
            "halfprec-fp16": lambda n: 0.0042,
        }
    )
    result = benchmark(
        Tiny(), X, variants=["halfprec-bf16", "halfprec-fp16"], bench=TEN, timer=clock
    )
    assert clock.calls == {"fp32": 60, "halfprec-bf16": 50, "halfprec-fp16": 10}
    assert fastest_variant(result).name == "halfprec-bf16"


def test_claiming_counts_rounds_and_seconds() -> None:
    race = Race(claim_rounds=5, claim_s=2.0, claim_max_rounds=30)
    assert race.claiming(4, 10.0)  # rounds short
    assert race.claiming(5, 1.9) and not race.claiming(5, 2.0)  # seconds short, then met
    assert not race.claiming(30, 0.1)  # the cap
    with pytest.raises(ValueError, match=r"Race\(claim_s=-1"):
        Race(claim_s=-1.0)
    with pytest.raises(ValueError, match=r"claim_max_rounds=4"):
        Race(claim_max_rounds=4)
