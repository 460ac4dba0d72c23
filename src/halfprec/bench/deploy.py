"""``deploy(model, inputs)``: the fastest module for this device that is checked against
fp32, with the measurements that chose it.

It benchmarks fp32 and halfprec's conversion in each half dtype, eager and compiled with
the device's deploy recipe (:data:`~halfprec.bench.variants.COMPILE_RECIPES`: inductor
freezing on CPU, ``max-autotune`` with CUDA graphs on CUDA), compares every output with
fp32's, and returns the fastest variant within tolerance, already warmed up (and so
already compiled for the example batch's shapes). fp32 wins when nothing beats it. Half
dtypes whose matrix products run far slower than fp32 here are probed and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from halfprec.batch import as_batches
from halfprec.bench.runner import (
    BenchConfig,
    BenchResult,
    VariantResult,
    _Runner,
    fastest_variant,
    run_benchmark,
)
from halfprec.bench.variants import parse_variants
from halfprec.compare import Tolerance
from halfprec.convert.core import ConfigLike, ConvertConfig
from halfprec.dtypes import dtype_name, parse_dtype

__all__ = ["DeployConfig", "Deployed", "deploy"]


def _quick() -> BenchConfig:
    return BenchConfig(runs=5, memory="none", max_variant_s=15.0)


@dataclass(frozen=True)
class DeployConfig:
    """What :func:`deploy` tries: ``dtypes`` (half dtypes, besides fp32), ``compile``
    (also each under ``torch.compile``), ``eager`` (also uncompiled), and how it measures
    (``bench``) and judges accuracy (``tolerance``; None: the per-dtype default).
    ``convert``: the :class:`~halfprec.ConvertConfig` (islands, policy) of the halfprec
    variants; its dtype is ignored (``dtypes`` decides)."""

    dtypes: tuple[str, ...] = ("bf16", "fp16")
    compile: bool = True
    eager: bool = True
    tolerance: Tolerance | None = None
    bench: BenchConfig = field(default_factory=_quick)
    convert: ConfigLike = None

    def __post_init__(self) -> None:
        if isinstance(self.dtypes, str):
            raise ValueError(f"dtypes must be a tuple such as ('bf16',), got {self.dtypes!r}")
        object.__setattr__(self, "dtypes", tuple(dtype_name(parse_dtype(d)) for d in self.dtypes))
        if not (self.compile or self.eager):
            raise ValueError("compile and eager are both False: deploy has nothing to try")


@dataclass
class Deployed:
    """The chosen module (``model``), the variant it is (``choice``) and every
    measurement (``report``: a :class:`~halfprec.bench.BenchResult`)."""

    model: nn.Module
    choice: VariantResult
    report: BenchResult

    @property
    def summary(self) -> str:
        c = self.choice
        speed = f"{c.speedup:.2f}x fp32" if c.speedup else "fp32 speed"
        comp = f", compiled in {c.compile_s:.1f} s" if c.compile_s is not None else ""
        return f"{c.name}: {speed}{comp}, within tolerance"


def deploy(model: nn.Module, inputs: Any, config: DeployConfig | None = None) -> Deployed:
    """The fastest checked way to run ``model`` on its device (see module docs).

    ``model`` is not changed: every candidate is built from a copy. The returned module
    was warmed up on ``inputs``' first batch; compiled modules recompile for new shapes,
    so warm it on each serving shape before taking traffic (docs/bench.md).
    """
    cfg = config or DeployConfig()
    base = ["fp32"] + [f"halfprec-{d}" for d in cfg.dtypes]
    names = (base if cfg.eager else []) + ([f"{n}+compile" for n in base] if cfg.compile else [])
    variants = parse_variants(names)
    batch = as_batches(inputs)[0]
    runner = _Runner(
        model, batch, variants, cfg.bench, ConvertConfig.of(cfg.convert), cfg.tolerance, None, None
    )
    runner.keep_modules = True
    result, modules = run_benchmark(runner)
    best = fastest_variant(result)
    chosen = modules.get(best.name)
    if chosen is None:  # fp32 itself, when it was not kept (never timed: cannot happen)
        chosen = model
    return Deployed(chosen, best, result)
