"""Speed, memory and accuracy of every way to run a model in half precision, side by side.

``benchmark(model, inputs)`` times each :class:`~halfprec.bench_variants.Variant`: median
and p90 latency after warm-up and throughput, with the variants' timed calls interleaved
round-robin so that load on a shared machine hits them alike. It measures peak memory
(``max_memory_allocated`` on CUDA-like devices; on CPU the peak RSS of a clean subprocess
per variant, when the model is given as a MODEL spec), counts model bytes, and compares
each variant's outputs with fp32's on the same batch. ``fastest_variant`` and
``choose_dtype_by_measurement`` turn the numbers into a choice: the fastest variant that
meets the tolerance, never one slower than fp32.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch, as_batches, batch_size_of, call, resize_batch
from halfprec.bench.machine import MachineInfo, machine_info
from halfprec.bench.variants import Variant, build_variant, fp32_matmuls, parse_variants
from halfprec.bench.worker import MemoryUse, measure_in_subprocess
from halfprec.compare import Comparison, Tolerance, compare_outputs
from halfprec.convert.core import ConfigLike, ConvertConfig
from halfprec.dtypes import dtype_name
from halfprec.modules import evaluating, first_line, model_device, nbytes
from halfprec.timing import Timing, measure, synchronize

__all__ = [
    "BenchConfig",
    "VariantResult",
    "BenchResult",
    "MeasuredChoice",
    "benchmark",
    "fastest_variant",
    "choose_dtype_by_measurement",
    "SPREAD_WARNING",
    "matmul_slowdown",
]

SPREAD_WARNING = 0.2  # (p90 - min) / median above this: too noisy to trust small ratios

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class BenchConfig:
    """How long to measure. ``max_call_s``: a variant whose warm call takes longer is timed
    once and reported as capped; ``max_variant_s``: fewer runs (at least 3) for slow ones.
    ``memory``: measure peak memory at ``every`` batch size, the ``first`` only, or ``none``.
    ``skip_slower_than``: skip the variants of a half dtype whose matmul is this many times
    slower than fp32 on the device (measured once by :func:`matmul_slowdown`)."""

    batch_sizes: tuple[int, ...] = ()
    warmup: int = 2
    runs: int = 10
    max_call_s: float = 10.0
    max_variant_s: float = 30.0
    items_per_sample: int = 1
    unit: str = "samples"
    memory: str = "every"
    skip_slower_than: float | None = None

    def __post_init__(self) -> None:
        if self.memory not in ("every", "first", "none"):
            raise ValueError(f"memory must be 'every', 'first' or 'none', got {self.memory!r}")
        if self.skip_slower_than is not None and self.skip_slower_than <= 0:
            raise ValueError(f"skip_slower_than must be > 0, got {self.skip_slower_than}")
        if any(b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch sizes must be >= 1, got {list(self.batch_sizes)}")
        if self.runs < 1 or self.warmup < 1:
            raise ValueError(f"need runs >= 1 and warmup >= 1, got {self.runs}, {self.warmup}")
        if self.max_call_s <= 0 or self.max_variant_s <= 0:
            raise ValueError("max_call_s and max_variant_s must be > 0 seconds")
        if self.items_per_sample < 1:
            raise ValueError(f"items_per_sample must be >= 1, got {self.items_per_sample}")


@dataclass
class VariantResult:
    """One variant at one batch size. ``status``: ok, capped (one timed call), skipped (see
    ``note``), or failed."""

    variant: Variant
    batch_size: int
    status: str
    note: str = ""
    timing: Timing | None = None
    items_per_call: int = 0
    model_bytes: int = 0
    memory: MemoryUse | None = None
    comparison: Comparison | None = None
    speedup: float | None = None

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def median_s(self) -> float | None:
        return None if self.timing is None else self.timing.median

    @property
    def throughput(self) -> float | None:
        med = self.median_s
        return self.items_per_call / med if med else None

    @property
    def accurate(self) -> bool:
        """Meets the tolerance (fp32 is the reference, so it always does)."""
        if self.variant.kind == "fp32" and not self.variant.compiled:
            return True
        return self.comparison is not None and self.comparison.passed

    def to_json(self) -> dict[str, Any]:
        t = self.timing
        cmp = self.comparison
        return {
            "variant": self.name,
            "kind": self.variant.kind,
            "dtype": dtype_name(self.variant.dtype),
            "compiled": self.variant.compiled,
            "batch_size": self.batch_size,
            "status": self.status,
            "note": self.note,
            "median_s": None if t is None else t.median,
            "p90_s": None if t is None else t.p90,
            "spread": None if t is None else t.spread,
            "runs": 0 if t is None else len(t.samples),
            "throughput": self.throughput,
            "speedup": self.speedup,
            "model_bytes": self.model_bytes,
            "memory": None if self.memory is None else self.memory.to_json(),
            "cosine": None if cmp is None or not cmp.outputs else cmp.worst_cosine,
            "accurate": self.accurate,
            "comparison": None if cmp is None else cmp.to_json(),
        }


@dataclass
class BenchResult:
    """Every variant at every batch size, the machine they ran on, and warnings."""

    model: str
    device: str
    machine: MachineInfo
    unit: str
    results: list[VariantResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def batch_sizes(self) -> list[int]:
        return list(dict.fromkeys(r.batch_size for r in self.results))

    def at(self, batch_size: int) -> list[VariantResult]:
        return [r for r in self.results if r.batch_size == batch_size]

    def get(self, name: str, batch_size: int | None = None) -> VariantResult:
        bs = self.batch_sizes[0] if batch_size is None else batch_size
        for r in self.at(bs):
            if r.name == name:
                return r
        raise KeyError(f"no variant {name!r} at batch size {bs}")

    def to_json(self) -> dict[str, Any]:
        auto = {str(b): fastest_variant(self, b).name for b in self.batch_sizes}
        return {
            "model": self.model,
            "device": self.device,
            "unit": self.unit,
            "machine": self.machine.to_json(),
            "warnings": self.warnings,
            "auto_choice": auto,
            "results": [r.to_json() for r in self.results],
        }


def _allocator(device: torch.device) -> Any:
    """The device module with peak-allocation counters (torch.cuda, torch.xpu...), or None."""
    mod = getattr(torch, device.type, None)
    if mod is not None and hasattr(mod, "max_memory_allocated"):
        return mod
    return None


def matmul_slowdown(
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    shape: tuple[int, int, int] = (512, 768, 3072),
) -> float:
    """How many times slower a linear layer (``rows, in, out`` = ``shape``, BERT-base's
    MLP by default) runs in ``dtype`` than in fp32 on ``device`` (below 1: faster). A quick
    probe, medians of 5 calls. (Small shapes can hide the cost: some CPU kernels only
    slow down above a size.)"""
    rows, width, out = shape
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, width, generator=gen).to(device)
    w = torch.randn(out, width, generator=gen).to(device)
    times: dict[torch.dtype, float] = {}
    with torch.inference_mode(), fp32_matmuls():
        for dt in (torch.float32, dtype):
            xd, wd = x.to(dt), w.to(dt)

            def linear(xd: torch.Tensor = xd, wd: torch.Tensor = wd) -> torch.Tensor:
                return torch.nn.functional.linear(xd, wd)

            times[dt] = measure(linear, device=device, runs=5).median
    return times[dtype] / times[torch.float32] if times[torch.float32] > 0 else 1.0


class _Runner:
    """Runs one benchmark: fp32 first at each batch size, then each variant."""

    def __init__(
        self,
        model: nn.Module,
        batch: Batch,
        variants: list[Variant],
        config: BenchConfig,
        convert_config: ConvertConfig,
        tolerance: Tolerance | None,
        spec: str | None,
        progress: Progress | None,
    ) -> None:
        self.model, self.batch, self.variants, self.config = model, batch, variants, config
        self.tolerance, self.convert_config = tolerance, convert_config
        self.spec, self.progress = spec, progress
        self.device = model_device(model)
        self.allocator = _allocator(self.device)
        self.skips = self._skips()
        self.measure_memory = config.memory != "none"

    def _skips(self) -> dict[torch.dtype, str]:
        limit = self.config.skip_slower_than
        if limit is None:
            return {}
        skips = {}
        for dtype in {v.dtype for v in self.variants if v.kind != "fp32"}:
            slow = matmul_slowdown(dtype, self.device)
            if slow > limit:
                skips[dtype] = (
                    f"{dtype_name(dtype)} matmuls run {slow:.1f}x slower than fp32 on this "
                    f"device (probe; limit {limit:g}x)"
                )
        return skips

    def run(self, result: BenchResult) -> None:
        sizes = self.config.batch_sizes or (batch_size_of(self.batch),)
        total, step = len(sizes) * len(self.variants), 0
        for index, size in enumerate(sizes):
            self.measure_memory = self.config.memory == "every" or (
                self.config.memory == "first" and index == 0
            )
            batch = resize_batch(self.batch, size)
            reference: Any = None
            prepared: list[tuple[VariantResult, nn.Module | None, int]] = []
            for variant in self.variants:
                if self.progress is not None:
                    self.progress(step, total, f"{variant.name} @ batch {size}")
                r, module, output, runs = self._prepare(variant, batch, size, reference)
                if variant == Variant("fp32"):
                    reference = output
                prepared.append((r, module, runs))
                step += 1
            self._time_interleaved(prepared, batch)
            fp32_median = prepared[0][0].median_s
            for r, _, _ in prepared:
                if r.median_s and fp32_median:
                    r.speedup = fp32_median / r.median_s
                if self.measure_memory and r.memory is None and r.status == "ok" and self.spec:
                    r.memory = measure_in_subprocess(
                        self.spec, r.variant, size, self.convert_config
                    )
                result.results.append(r)
                if r.timing is not None and r.timing.spread > SPREAD_WARNING and r.status == "ok":
                    result.warnings.append(
                        f"{r.name} @ batch {size}: runs spread {r.timing.spread:.0%} "
                        "((p90-min)/median); the machine is busy, distrust small ratios"
                    )
        if self.progress is not None:
            self.progress(total, total, "done")

    def _time_interleaved(
        self, prepared: list[tuple[VariantResult, nn.Module | None, int]], batch: Batch
    ) -> None:
        """Time the variants round-robin, one call each per round, so that a burst of load
        on a shared machine hits every variant alike instead of one variant's median."""
        samples: dict[int, list[float]] = {i: [] for i in range(len(prepared))}
        rounds = max((runs for _, _, runs in prepared), default=0)
        with torch.inference_mode(), fp32_matmuls():
            for round_ in range(rounds):
                for i, (r, module, runs) in enumerate(prepared):
                    if module is None or round_ >= runs or r.status != "ok":
                        continue
                    try:
                        start = time.perf_counter()
                        call(module, batch)
                        synchronize(self.device)
                        samples[i].append(time.perf_counter() - start)
                    except Exception as exc:
                        r.status = "failed"
                        r.note = first_line(exc)
        for i, (r, _, _) in enumerate(prepared):
            if r.status == "ok" and samples[i]:
                r.timing = Timing(tuple(samples[i]))

    def _prepare(
        self, variant: Variant, batch: Batch, size: int, reference: Any
    ) -> tuple[VariantResult, nn.Module | None, Any, int]:
        """Build and warm one variant, compare its first output with fp32's, and plan its
        timed runs (0 when skipped, capped or failed)."""
        cfg = self.config
        items = size * cfg.items_per_sample
        if variant.dtype in self.skips:
            skipped = VariantResult(variant, size, "skipped", self.skips[variant.dtype])
            return skipped, None, None, 0
        gc.collect()
        # the fp32 original and the reference outputs stay resident; count only the variant
        before = 0 if self.allocator is None else int(self.allocator.memory_allocated(self.device))
        try:
            module = build_variant(self.model, variant, self.convert_config)
        except Exception as exc:  # a variant that cannot be built is a finding, not a crash
            failed = VariantResult(variant, size, "failed", f"build: {first_line(exc)}")
            return failed, None, None, 0
        result = VariantResult(variant, size, "ok", items_per_call=items)
        result.model_bytes = nbytes(module)
        if self.allocator is not None:
            synchronize(self.device)
            self.allocator.reset_peak_memory_stats(self.device)
        runs = 0
        try:
            with torch.inference_mode(), fp32_matmuls():
                output, last = self._warm(module, batch, variant)
        except Exception as exc:
            result.status = "failed"
            result.note = first_line(exc)
            return result, None, None, 0
        if last > cfg.max_call_s:
            result.status = "capped"
            result.timing = Timing((last,))
            result.note = f"timed once: one call took {last:.1f} s > cap {cfg.max_call_s:g} s"
        else:
            runs = min(cfg.runs, max(3, int(cfg.max_variant_s / max(last, 1e-9))))
        if self.measure_memory and self.allocator is not None:
            peak = int(self.allocator.max_memory_allocated(self.device)) - before
            result.memory = MemoryUse(
                peak, max(0, peak - result.model_bytes), "max_memory_allocated"
            )
        if reference is not None and output is not None:
            tol = self.tolerance
            dtype = None if variant.kind == "fp32" else variant.dtype
            result.comparison = compare_outputs([reference], [output], tolerance=tol, dtype=dtype)
        return result, (module if runs else None), output, runs

    def _warm(self, module: nn.Module, batch: Batch, variant: Variant) -> tuple[Any, float]:
        """Warm-up calls; returns the first output and the last call's seconds. Stops early
        when a call after the first (which may compile) exceeds the cap."""
        output: Any = None
        last = 0.0
        for i in range(self.config.warmup):
            start = time.perf_counter()
            out = call(module, batch)
            synchronize(self.device)
            last = time.perf_counter() - start
            if i == 0:
                output = out
            if last > self.config.max_call_s and (i > 0 or not variant.compiled):
                break
        return output, last


def benchmark(
    model: nn.Module,
    inputs: Any,
    config: ConfigLike = None,
    *,
    bench: BenchConfig | None = None,
    variants: Sequence[str | Variant] | None = None,
    compile: bool = False,
    tolerance: Tolerance | None = None,
    spec: str | None = None,
    name: str = "",
    progress: Progress | None = None,
) -> BenchResult:
    """Time, size and compare each variant of ``model`` on the first batch of ``inputs``.

    ``config``: a :class:`ConvertConfig` or a dtype. Its islands shape the halfprec
    variants; its dtype picks the default variants: ``"auto"`` (default) every candidate
    dtype (:func:`~halfprec.dtypes.candidate_dtypes`: fp16 and bf16 where the device runs
    them), an explicit dtype only that one. ``bench``: how long to measure.
    ``variants``: names such as ``"naive-bf16"`` or :class:`Variant` objects (fp32 always
    included); ``compile=True`` adds a ``torch.compile`` twin of each.
    ``spec``: the MODEL spec ``model`` came from; with it, CPU peak memory is measured in a
    clean subprocess per variant (without it, CPU memory is not reported).
    ``progress(step, total, label)`` is called before each variant.
    """
    cfg = ConvertConfig.of(config)
    options = bench or BenchConfig()
    device = model_device(model)
    texts = [v.name if isinstance(v, Variant) else v for v in variants] if variants else None
    chosen = parse_variants(texts, compile=compile, dtypes=cfg.candidates(device))
    batch = as_batches(inputs)[0]
    result = BenchResult(
        model=name or type(model).__name__,
        device=str(device),
        machine=machine_info(device),
        unit=options.unit,
    )
    with evaluating(model):
        _Runner(model, batch, chosen, options, cfg, tolerance, spec, progress).run(result)
    return result


def fastest_variant(
    result: BenchResult,
    batch_size: int | None = None,
    *,
    kinds: Sequence[str] = ("fp32", "halfprec"),
) -> VariantResult:
    """The fastest measured variant of ``kinds`` that meets its tolerance; fp32 when no
    such variant beats it. (Capped and failed variants never win.)"""
    rows = result.at(result.batch_sizes[0] if batch_size is None else batch_size)
    fp32 = next(r for r in rows if r.variant == Variant("fp32"))
    best = fp32
    for r in rows:
        if r.variant.kind not in kinds or r.status != "ok" or not r.accurate:
            continue
        if r.median_s is not None and best.median_s is not None and r.median_s < best.median_s:
            best = r
    return best


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
    config: ConfigLike = None,
    *,
    tolerance: Tolerance | None = None,
    kinds: Sequence[str] = ("halfprec",),
    bench: BenchConfig | None = None,
) -> MeasuredChoice:
    """``auto`` by measurement: time fp32 and the ``kinds`` variants of each candidate dtype
    of ``config`` (:meth:`ConvertConfig.candidates`), keep the fastest that meets
    ``tolerance``. Returns ``torch.float32`` when no half variant is faster here."""
    cfg = ConvertConfig.of(config)
    options = bench or BenchConfig(runs=5, max_call_s=5.0, max_variant_s=15.0)
    dtypes = cfg.candidates(model_device(model))
    candidates = [Variant(k, dt) for k in kinds for dt in dtypes]
    result = benchmark(
        model, inputs, cfg, bench=options, variants=["fp32", *candidates], tolerance=tolerance
    )
    best = fastest_variant(result, kinds=("fp32", *kinds))
    speedup = best.speedup or 1.0
    if best.variant.kind == "fp32":
        others = [r for r in result.results if r.variant.kind != "fp32"]
        why = "; ".join(
            f"{r.name}: "
            + (
                "out of tolerance"
                if not r.accurate
                else f"{r.status} {r.note}".strip()
                if r.status != "ok"
                else f"{r.speedup or 0:.2f}x"
            )
            for r in others
        )
        reason = f"no half variant is faster than fp32 within tolerance here ({why})"
    else:
        reason = f"{best.name} is {speedup:.2f}x faster than fp32 and within tolerance"
    return MeasuredChoice(best.variant.dtype, best.name, speedup, reason, result)
