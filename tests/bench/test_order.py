"""The order candidates are timed in: the likely fastest first, so that the race stops the
others after its minimum rounds (scripted timings, real comparisons; nothing compiles)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from halfprec import BenchConfig
from halfprec.bench.order import timing_order
from halfprec.bench.runner import Benchmark
from halfprec.bench.variants import Variant
from halfprec.bench.ways import register, unregister
from halfprec.bench.ways.base import Way
from halfprec.convert.recipe import Recipe
from testbed.clocks import VariantClock

X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
TEN = BenchConfig(warmup=1, runs=10, memory="none", skip_slower_than=None, limit=False)


class _Runtime(Way):
    """A runtime target that builds anywhere (the model itself, run by "another runtime"),
    registered only inside these tests: OpenVINO's bf16 needs AVX512-BF16 or AMX."""

    name = "elsewhere"
    summary = "a test runtime target"
    dtypes = (torch.float32, torch.bfloat16)
    runs_in = "elsewhere"
    compilable = False
    saving = "not saved"

    def build(
        self, model: nn.Module, dtype: torch.dtype, recipe: Recipe, batch: object
    ) -> nn.Module:
        return model


@pytest.fixture
def runtime() -> Iterator[None]:
    register(_Runtime())
    try:
        yield
    finally:
        unregister("elsewhere")


def _names(variants: list[Variant], order: list[int]) -> list[str]:
    return [variants[j].name for j in order]


def test_half_runtime_targets_come_first_and_compiled_candidates_last(runtime: None) -> None:
    names = [
        "fp32",
        "halfprec-bf16",
        "elsewhere-fp32",
        "fp32+compile",
        "elsewhere-bf16",
        "halfprec-bf16+compile",
        "naive-bf16",
    ]
    variants = [Variant.parse(n) for n in names]
    assert _names(variants, timing_order(variants)) == [
        "elsewhere-bf16",  # a runtime computing in a half dtype: the likely fastest
        "halfprec-bf16",
        "elsewhere-fp32",
        "naive-bf16",
        "fp32+compile",  # every eager twin is measured before its compiled twin
        "halfprec-bf16+compile",
    ]
    # without a half runtime target the order is the given one, eager before compiled
    torch_only = [Variant.parse(n) for n in ("fp32", "halfprec-bf16+compile", "halfprec-bf16")]
    assert _names(torch_only, timing_order(torch_only)) == [
        "halfprec-bf16",
        "halfprec-bf16+compile",
    ]


def test_a_slower_candidate_timed_after_the_fastest_stops_early(
    runtime: None,
) -> None:
    # halfprec-bf16 2x fp32, the runtime target 2.5x: timed first, halfprec-bf16 was the
    # leader so far and ran the claim's 5 rounds before the runtime ran its own 5
    clock = VariantClock({"fp32": 1.0, "halfprec-bf16": 0.5, "elsewhere-bf16": 0.4})
    variants = [Variant("fp32"), Variant.parse("halfprec-bf16"), Variant.parse("elsewhere-bf16")]
    torch.manual_seed(0)
    result = Benchmark(nn.Linear(16, 16), X, variants=variants, options=TEN, timer=clock).run()
    rows = {r.name: r for r in result.result.results}
    assert [r.name for r in result.result.results] == ["fp32", "halfprec-bf16", "elsewhere-bf16"]
    assert [n for n in clock.calls if n != "fp32"][0] == "elsewhere-bf16"
    runtime_rounds, torch_rounds = rows["elsewhere-bf16"].timing, rows["halfprec-bf16"].timing
    assert runtime_rounds is not None and torch_rounds is not None
    assert len(runtime_rounds.samples) == 5  # the claim's rounds (Race.claim_rounds)
    # beaten by 25% in every round, far beyond their spreads (none): Race.early_rounds
    assert len(torch_rounds.samples) == 2
    assert rows["halfprec-bf16"].speedup == pytest.approx(2.0)
    assert rows["elsewhere-bf16"].speedup == pytest.approx(2.5)
