"""The runner's own housekeeping between candidates (scripted timings; nothing compiles)."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from halfprec import BenchConfig
from halfprec.bench.runner import Benchmark
from halfprec.bench.variants import Variant

X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
TEN = BenchConfig(warmup=1, runs=10, memory="none", skip_slower_than=None, limit=False)
SKIPPED = {"halfprec-fp16", "fp32+compile", "halfprec-fp16+compile"}


class _Skipping(Benchmark):
    """The runner as it is, but for candidates skipped by name (as a probe, a gate or a
    missing package skips them on some machine) and compiled ones built eager."""

    def _skip_reason(self, variant: Variant, at: list) -> str | None:  # type: ignore[type-arg]
        return "skipped here" if variant.name in SKIPPED else super()._skip_reason(variant, at)

    def _build(self, variant: Variant, batch: object) -> object:  # type: ignore[override]
        return super()._build(Variant(variant.kind, variant.dtype), batch)  # type: ignore[arg-type]


def test_one_full_collection_per_candidate_built_and_none_for_a_skipped_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full collection walks every object of the process (a few tenths of a second beside
    transformers and a compile): one after each built candidate is released frees it;
    one before each build and one for each skipped candidate freed nothing more."""
    calls: list[int] = []
    collect = gc.collect

    def counted(generation: int = 2) -> int:
        calls.append(generation)
        return collect(generation)

    monkeypatch.setattr(gc, "collect", counted)
    torch.manual_seed(0)
    names = ["halfprec-fp16", "halfprec-bf16", "fp32+compile", "halfprec-fp16+compile"]
    variants = [Variant("fp32"), *map(Variant.parse, names), Variant.parse("halfprec-bf16+compile")]
    times = {"fp32": 1.0, "halfprec-bf16": 0.5, "halfprec-bf16+compile": 0.4}
    run = _Skipping(
        nn.Linear(16, 16), X, variants=variants, options=TEN, timer=lambda fn, v: times[v.name]
    ).run()
    rows = {r.name: r.status for r in run.result.results}
    assert rows == {"fp32": "ok", "halfprec-bf16": "ok", "halfprec-bf16+compile": "ok"} | {
        n: "skipped" for n in SKIPPED
    }
    assert calls == [2, 2]  # one per built candidate: halfprec-bf16 and its compiled twin
