"""``deploy(model, inputs, config)``: the fastest module for this device that is checked
against fp32, with the measurements that chose it.

It benchmarks fp32 and halfprec's conversion in each candidate half dtype of ``config``
(``"auto"``: every half dtype the device runs), eager and compiled with the device's deploy
recipe (:data:`~halfprec.bench.variants.COMPILE_RECIPES`: on CPU torch.compile's default for
fp32, which inductor caches on disk so that a repeat deploy loads the compiled graph, and
inductor freezing for fp16/bf16;
``max-autotune`` with CUDA graphs on CUDA), compares every output with fp32's, and returns
the fastest variant within tolerance, already warmed up (and so already compiled for the
example batch's shapes; a compiled choice runs every call under ``torch.no_grad()``
outside inference mode, as it was warmed, so no call compiles it again). fp32 wins when
nothing beats it. Half dtypes whose matrix products a quick probe finds far slower than
fp32 here are skipped, never built or compiled (the probe's verdict is cached per
machine: :mod:`halfprec.bench.probe_cache`), and the candidates are raced: each stops
being timed once its rank is settled (:class:`~halfprec.bench.race.Race`).
``Deployed.time_spent`` says where the time went.

``runtimes=("openvino", "onnxruntime")`` also tries those runtimes
(:mod:`halfprec.bench.runtime_choice`): one wins only when it passes the same check and is
faster than the torch choice by its spread.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from halfprec.batch import as_batches
from halfprec.bench.limit import GemmLimit, Timer
from halfprec.bench.results import BenchConfig, BenchResult, VariantResult, fastest_variant
from halfprec.bench.runner import Progress, _Runner, run_benchmark
from halfprec.bench.runtime_choice import runtime_variants, with_runtimes
from halfprec.bench.spread import variant_speed
from halfprec.bench.variants import Variant, build_variant
from halfprec.compare import Tolerance
from halfprec.convert.core import ConfigLike, Recipe
from halfprec.modules import model_device
from halfprec.timing import spent_text, spread_text

__all__ = ["Deployed", "deploy"]


def _quick() -> BenchConfig:
    """deploy's measurement: one warm-up call (a compiled variant's compiling call and one
    more), up to 5 timed rounds, no memory measurement."""
    return BenchConfig(warmup=1, runs=5, memory="none", max_variant_s=15.0)


@dataclass
class Deployed:
    """The chosen module (``model``), the variant it is (``choice``) and every
    measurement (``report``: a :class:`~halfprec.bench.results.BenchResult`, with the
    skipped and out-of-tolerance variants and each half dtype's GEMM limit). ``seconds``:
    where deploy's time went, by phase (``probe``, ``limit``, ``build``, ``warm-up``,
    ``compile``, ``compare``, ``timing``) and in all (``total``)."""

    model: nn.Module
    choice: VariantResult
    report: BenchResult
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def variant(self) -> str:
        """The chosen variant's name, e.g. ``"halfprec-bf16+compile"``."""
        return self.choice.name

    @property
    def runtime(self) -> str:
        """What runs the chosen module: ``"torch"``, ``"openvino"`` or ``"onnxruntime"``."""
        v = self.choice.variant
        return v.kind if v.runtime else "torch"

    @property
    def speedup(self) -> float:
        """Speed over eager fp32 in the same run (1.0 when fp32 itself was chosen)."""
        return self.choice.speedup or 1.0

    @property
    def compile_s(self) -> float | None:
        """Seconds of the first (compiling) call; None for an eager variant."""
        return self.choice.compile_s

    @property
    def limit(self) -> GemmLimit | None:
        """The chosen half dtype's GEMM limit (None for fp32, or when not measured)."""
        v = self.choice.variant
        return None if v.kind == "fp32" else self.report.limit(v.dtype, self.choice.batch_size)

    @property
    def efficiency(self) -> float | None:
        """``speedup / limit.ratio`` (None for fp32)."""
        return self.choice.efficiency

    @property
    def summary(self) -> str:
        """One line, e.g. ``halfprec-bf16+compile: 3.90x faster (IQR 3.80-4.00x over 5
        rounds) than fp32 (0.91 of the limit 4.30x), compiled in 41.2 s, within tolerance``
        (``too noisy to rank`` where the rounds' spread does not say it is faster), or
        ``fp32: 1.00x fp32, ...``; skipped variants are named."""
        spread = variant_speed(self.report, self.choice)
        speed = (
            f"{self.speedup:.2f}x fp32" if spread is None else f"{spread_text(spread)} than fp32"
        )
        lim = self.limit
        if lim is not None and self.efficiency is not None:
            speed += f" ({self.efficiency:.2f} of the limit {lim.ratio:.2f}x)"
        comp = f", compiled in {self.compile_s:.1f} s" if self.compile_s is not None else ""
        rows = [r for r in self.report.results if r.status == "skipped"]
        skipped = sorted({r.name for r in rows if not r.variant.runtime}, key=len)
        skip = f"; skipped (probed slow): {', '.join(skipped)}" if skipped else ""
        absent = sorted({r.name for r in rows if r.variant.runtime})
        skip += f"; not run here: {', '.join(absent)} (see report notes)" if absent else ""
        return f"{self.variant}: {speed}{comp}, within tolerance{skip}"

    @property
    def time_spent(self) -> str:
        """Where deploy's time went, e.g. ``deploy took 41.9 s: compile 30.2 s, timing
        6.1 s, probe 2.0 s, ...`` (largest first)."""
        return spent_text("deploy", self.seconds)

    def to_json(self) -> dict[str, Any]:
        lim = self.limit
        spread = variant_speed(self.report, self.choice)
        return {
            "variant": self.variant,
            "runtime": self.runtime,
            "speedup": self.speedup,
            "speedup_spread": None if spread is None else spread.to_json(),
            "efficiency": self.efficiency,
            "limit": None if lim is None else lim.ratio,
            "compile_s": self.compile_s,
            "accurate": self.choice.accurate,
            "seconds": dict(self.seconds),
            "report": self.report.to_json(),
        }


def deploy(
    model: nn.Module,
    inputs: Any,
    config: ConfigLike = "auto",
    *,
    compile: bool = True,
    eager: bool = True,
    tolerance: Tolerance | None = None,
    bench: BenchConfig | None = None,
    progress: Progress | None = None,
    probe_timer: Timer | None = None,
    runtimes: Sequence[str] = (),
) -> Deployed:
    """The fastest way to run ``model`` on its device that meets ``tolerance`` against
    fp32 on the first batch of ``inputs`` (see the module docs).

    ``config``: a :class:`~halfprec.Recipe` or a dtype. Its dtype picks the half
    dtypes tried (``"auto"``: every one the device runs; ``"bf16"``: only bf16) and its
    islands shape the halfprec variants. ``compile``: also try each under
    ``torch.compile`` (the device's deploy recipe); ``eager``: also try each uncompiled.
    ``tolerance``: None for the per-dtype default. ``bench``: how long to measure
    (default: one warm-up call, two for a compiled variant, whose first call compiles; up
    to 5 timed rounds; no memory measurement). ``probe_timer``: how the slow-dtype
    probe times a call (:data:`~halfprec.bench.limit.Timer`; default the wall clock).
    ``Deployed.time_spent`` says where the time went. ``runtimes``: also try these
    runtimes (``"openvino"``, ``"onnxruntime"``, or ``["all"]``) on the CPU, in fp32 and
    each half dtype of ``config`` they offer; a missing package or a precision the CPU
    lacks skips that variant with a note in the report.

    ``model`` is not changed: every candidate is built from a copy. The returned module
    was warmed up on that batch; compiled modules recompile for new shapes, so warm it on
    each serving shape before taking traffic (docs/bench.md).
    """
    if not (compile or eager):
        raise ValueError(
            "deploy(compile=False, eager=False) has nothing to try; set compile or eager"
        )
    start = time.perf_counter()
    cfg = Recipe.of(config)
    half = cfg.candidates(model_device(model))
    base = [Variant("fp32")] + [Variant("halfprec", dt) for dt in half]
    variants = (base if eager else []) + ([v.with_compile() for v in base] if compile else [])
    if not eager:  # speedups are measured against eager fp32, so it is always timed
        variants.insert(0, Variant("fp32"))
    variants += runtime_variants(runtimes, half)
    runner = _Runner(
        model, as_batches(inputs)[0], variants, bench or _quick(), cfg, tolerance, None, progress
    )
    runner.keep_modules, runner.probe_timer = True, probe_timer
    result, modules = run_benchmark(runner)
    best = with_runtimes(result, fastest_variant(result))
    chosen = modules.get(best.name)
    if chosen is None:  # fp32 when it was capped (timed once, not kept): a fresh copy
        with runner.phase("build"):
            chosen = build_variant(model, best.variant, cfg)
    seconds = {**runner.seconds, "total": time.perf_counter() - start}
    return Deployed(chosen, best, result, seconds)
