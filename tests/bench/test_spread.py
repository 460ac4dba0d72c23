"""bench.spread: a variant's speed against fp32 with its spread over the shared rounds
(timings injected into a real benchmark result; no timed test)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.bench.results import BenchResult
from halfprec.bench.spread import spread_json, variant_speed
from halfprec.timing import Timing


@pytest.fixture
def result() -> BenchResult:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
    cfg = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None)
    return benchmark(model, torch.randn(4, 16), variants=["naive-bf16"], bench=cfg)


def inject(result: BenchResult, fp32: tuple[float, ...], half: tuple[float, ...]) -> None:
    """One pair: fp32's calls in it are its row's and the variant's reference."""
    rows = {r.name: r for r in result.results}
    rows["fp32"].timing = Timing(fp32)
    rows["naive-bf16"].timing = Timing(half)
    rows["naive-bf16"].reference_timing = Timing(fp32)


def test_the_ratio_pairs_the_rounds_fp32_and_the_variant_shared(result: BenchResult) -> None:
    inject(result, (2.0, 20.0, 4.0), (1.0, 10.0, 2.0))
    fp32, half = result.results
    speed = variant_speed(result, half)
    assert speed is not None and (speed.median, speed.rounds, speed.ranked) == (2.0, 3, True)
    assert variant_speed(result, fp32) is None  # the reference has no ratio to itself


def test_a_capped_variant_has_one_shared_round_and_no_ranking(result: BenchResult) -> None:
    inject(result, (2.0, 2.0, 2.0), (1.0,))
    result.results[1].reference_timing = None  # timed once, in no pair
    speed = variant_speed(result, result.results[1])
    assert speed is not None and speed.rounds == 1 and not speed.ranked


def test_json_carries_each_variants_spread(result: BenchResult) -> None:
    inject(result, (1.0, 0.9, 1.1, 2.0, 3.0), (2.0, 1.0, 1.0, 1.0, 1.0))
    rows = spread_json(result)["results"]
    assert rows[0]["variant"] == "fp32" and rows[0]["speedup_spread"] is None
    spread = rows[1]["speedup_spread"]
    assert (spread["q1"], spread["q3"], spread["ranked"]) == (0.9, 2.0, False)
