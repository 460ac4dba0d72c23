"""Warm-up and peak device memory: the peak is reset after a compiling first call, so that
max-autotune's benchmarking buffers are not counted as the variant's (a stand-in for
``torch.cuda``'s allocation counters; no GPU needed)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from halfprec import BenchConfig
from halfprec.bench.runner import Benchmark
from halfprec.bench.variants import Variant
from halfprec.bench.warmup import WarmUp
from halfprec.modules import nbytes

AUTOTUNE = 1 << 30  # what a compiling call allocates for a while: benchmarking buffers
ACTIVATIONS = 4096  # what every call allocates for a while


class Counters:
    """Stands in for ``torch.cuda``'s allocation counters: the bytes allocated now and the
    peak since the last reset."""

    def __init__(self) -> None:
        self.allocated = 1 << 20
        self.peak = self.allocated
        self.resets = 0

    def memory_allocated(self, device: Any = None) -> int:
        return self.allocated

    def max_memory_allocated(self, device: Any = None) -> int:
        return self.peak

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.peak = self.allocated
        self.resets += 1

    def transient(self, nbytes: int) -> None:
        """``nbytes`` allocated and freed again: only the peak remembers them."""
        self.peak = max(self.peak, self.allocated + nbytes)


class Tiny(nn.Module):
    """Allocates ``ACTIVATIONS`` for a while on each call."""

    def __init__(self, counters: Counters) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(16, 16)
        self.counters = counters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.counters.transient(ACTIVATIONS)
        return self.fc(x)


class Autotuning(nn.Module):
    """Stands in for ``torch.compile(mode="max-autotune")``: its first call compiles and
    allocates ``AUTOTUNE`` for a while, benchmarking kernel candidates."""

    def __init__(self, module: nn.Module, counters: Counters) -> None:
        super().__init__()
        self.module, self.counters, self.compiled = module, counters, False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.compiled:
            self.counters.transient(AUTOTUNE)
            self.compiled = True
        return self.module(x)


X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))


def test_the_peak_is_reset_after_a_compiling_first_call() -> None:
    counters = Counters()
    module = Autotuning(Tiny(counters), counters)
    warm_up = WarmUp(torch.device("cpu"), calls=1, max_call_s=10.0, counters=counters)
    compiled = Variant("fp32", compiled=True)
    warm = warm_up.run(module, X, compiled)
    memory = warm_up.peak(warm, model_bytes=nbytes(module))
    assert memory is not None and memory.method == "max_memory_allocated"
    # two calls (the first compiles), the peak counter reset before the first and after it
    assert counters.resets == 2
    assert memory.delta_bytes == ACTIVATIONS
    assert memory.peak_bytes == nbytes(module) + ACTIVATIONS


def test_bench_reports_a_compiled_variants_peak_without_its_autotuning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counters = Counters()

    def compile(module: nn.Module, mode: str | None = None) -> nn.Module:
        return Autotuning(module, counters)

    monkeypatch.setattr(torch, "compile", compile)
    cfg = BenchConfig(warmup=1, runs=3, skip_slower_than=None, limit=False)
    variants = [Variant("fp32"), Variant("fp32", compiled=True)]
    model = Tiny(counters)
    run = Benchmark(model, X, variants=variants, options=cfg, counters=counters).run()
    for name in ("fp32", "fp32+compile"):
        row = run.result.get(name)
        assert row.status == "ok" and row.memory is not None, name
        # the module, resident, and what its warm calls allocated; never AUTOTUNE
        assert row.memory.peak_bytes == nbytes(model) + ACTIVATIONS, name
        assert row.memory.delta_bytes == ACTIVATIONS, name
    assert run.result.get("fp32+compile").compile_s is not None
