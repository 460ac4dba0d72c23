"""Racing: a variant stops being timed once its rank is settled, never on one noisy reading
(scripted timings only: no test here depends on the machine's speed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.bench.race import Race
from halfprec.bench.results import fastest_variant
from halfprec.bench.variants import Variant


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
    with pytest.raises(ValueError, match=r"Race\(margin=-0.1\): the margin must be >= 0"):
        Race(margin=-0.1)
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
    # unless "b" truly is slower by more than the margin (after 2 rounds: the early margin,
    # more than twice as slow).
    a = [true_a] * rounds
    b = [true_a * slower_by] * rounds
    a[hit_a % rounds] *= burst_a
    b[hit_b % rounds] *= burst_b
    race = Race()
    margin = race.margin if rounds >= race.min_rounds else race.early_margin
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
