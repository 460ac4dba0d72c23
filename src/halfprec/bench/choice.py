"""Choices made by measuring on this device: :func:`choose_dtype_by_measurement` (``auto``
by timing fp32 and each candidate dtype) and :func:`matmul_slowdown` (how much slower a
half dtype's matrix products run than fp32's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from halfprec.bench.interleave import CallTimer
from halfprec.bench.limit import Gemm, probe_slowdown
from halfprec.bench.results import BenchConfig, BenchResult, VariantResult, fastest_variant
from halfprec.bench.runner import benchmark
from halfprec.bench.spread import variant_speed
from halfprec.bench.variants import Variant
from halfprec.compare import Tolerance
from halfprec.convert.recipe import Recipe, RecipeLike
from halfprec.modules import model_device
from halfprec.timing import spread_text


def matmul_slowdown(
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    shape: tuple[int, int, int] = (512, 768, 3072),
) -> float:
    """How many times slower a linear layer (``rows, in, out`` = ``shape``, BERT-base's
    MLP by default) runs in ``dtype`` than in fp32 on ``device`` (below 1: faster). A quick
    probe (:func:`halfprec.bench.limit.probe_slowdown`). (Small shapes can hide the cost:
    some CPU kernels only slow down above a size.)"""
    rows, width, out = shape
    # fp32 under the caller's settings: the speed the caller's fp32 model runs at
    return probe_slowdown(dtype, device, Gemm(1, rows, width, out), give_up_at=float("inf"))


@dataclass(frozen=True)
class MeasuredChoice:
    """The dtype a measurement chose (``torch.float32``: convert nothing) and why."""

    dtype: torch.dtype
    variant: str
    speedup: float
    reason: str
    result: BenchResult


def choose_dtype_by_measurement(
    model: nn.Module,
    inputs: Any,
    recipe: RecipeLike = None,
    *,
    tolerance: Tolerance | None = None,
    kinds: Sequence[str] = ("halfprec",),
    bench: BenchConfig | None = None,
    timer: CallTimer | None = None,
) -> MeasuredChoice:
    """``auto`` by measurement: time fp32 and the ``kinds`` variants of each candidate dtype
    of ``recipe`` (:meth:`Recipe.settle`), keep the fastest that meets the tolerance (the
    recipe's, or ``tolerance``) and is faster than fp32 beyond the spread. Returns
    ``torch.float32`` when no half variant is faster here. ``timer``: how a timed call is
    timed (default the wall clock)."""
    chosen = Recipe.of(recipe)
    options = bench or BenchConfig(runs=5, max_call_s=5.0, max_variant_s=15.0)
    dtypes = chosen.settle(model_device(model), tolerance).dtypes
    candidates = [Variant(k, dt) for k in kinds for dt in dtypes]
    result = benchmark(
        model,
        inputs,
        chosen,
        bench=options,
        variants=["fp32", *candidates],
        tolerance=tolerance,
        timer=timer,
    )
    best = fastest_variant(result, kinds=("fp32", *kinds))
    speedup = best.speedup or 1.0
    if best.variant.kind == "fp32":
        others = [r for r in result.results if r.variant.kind != "fp32"]
        why = "; ".join(f"{r.name}: {_verdict(result, r)}" for r in others)
        reason = f"no half variant is faster than fp32 within tolerance here ({why})"
    else:
        reason = f"{best.name} is {_verdict(result, best)} than fp32 and within tolerance"
    return MeasuredChoice(best.variant.dtype, best.name, speedup, reason, result)


def _verdict(result: BenchResult, r: VariantResult) -> str:
    """A row's standing: why it was not compared or timed, out of tolerance, or its speed
    against fp32 with the spread (``too noisy to rank`` where the spread says nothing)."""
    if not r.checked or r.status != "ok":
        return f"{r.status} {r.note}".strip()
    if not r.accurate:
        return "out of tolerance"
    speed = variant_speed(result, r)
    return "not timed" if speed is None else spread_text(speed)
