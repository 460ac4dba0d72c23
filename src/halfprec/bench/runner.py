"""Speed, memory and accuracy of every way to run a model in half precision, side by side.

:class:`Benchmark` (and the verb ``benchmark(model, inputs)``) times each
:class:`~halfprec.bench.variants.Variant` after warm-up, the timed calls interleaved
(:mod:`halfprec.bench.interleave`) and raced; builds each variant once for every batch
size; measures peak memory (``max_memory_allocated`` on CUDA-like devices, the peak RSS of
a clean subprocess per variant on CPU given a MODEL spec) and compares each variant's
outputs with fp32's by the settled tolerance. In the same run it measures each half
dtype's eager GEMM ratio (:mod:`halfprec.bench.limit`; ``efficiency`` is a speedup over
it) and skips a dtype whose products a quick probe finds ``skip_slower_than`` times slower
than fp32. :func:`~halfprec.bench.results.fastest_variant` turns the numbers into a choice.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch, as_batches, batch_size_of, call, resize_batch
from halfprec.bench.interleave import CallTimer, Prepared, time_interleaved
from halfprec.bench.limit import (
    Gemm,
    GemmLimit,
    GemmRecorder,
    Timer,
    measure_limit,
    measure_slowdown,
    probe_gemm,
)
from halfprec.bench.machine import machine_info, machine_key
from halfprec.bench.probe_cache import ProbeCache, cache_dir
from halfprec.bench.results import BenchConfig, BenchResult, BenchRun, VariantResult
from halfprec.bench.variants import (
    AUTOTUNE_RECIPES,
    Variant,
    autotune_pays,
    build_variant,
    parse_variants,
)
from halfprec.bench.worker import MemoryUse, measure_in_subprocess
from halfprec.compare import Tolerance, compare_outputs, reference_failed
from halfprec.convert.recipe import Recipe, RecipeLike
from halfprec.dtypes import DeviceSupport, device_support, dtype_name
from halfprec.fp32 import exact_fp32, reduced_fp32
from halfprec.modules import evaluating, first_line, model_device, nbytes
from halfprec.runtimes import unavailable
from halfprec.timing import Timing, synchronize, timed_call
from halfprec.tree import map_tensors

__all__ = ["Benchmark", "benchmark", "SPREAD_WARNING"]

SPREAD_WARNING = 0.2  # (p90 - min) / median above this: too noisy to trust small ratios

Progress = Callable[[int, int, str], None]


def _allocator(device: torch.device) -> Any:
    """The device module with peak-allocation counters (torch.cuda, torch.xpu...), or None."""
    mod = getattr(torch, device.type, None)
    if mod is not None and hasattr(mod, "max_memory_allocated"):
        return mod
    return None


def _kept(output: Any) -> Any:
    """``output`` detached and cloned, to be read after the module's next call: a module
    under CUDA graphs (``torch.compile(mode="max-autotune")`` on CUDA) returns tensors in
    its graph's memory pool, which the next call overwrites ("accessing tensor output of
    CUDAGraphs that has been overwritten")."""
    return map_tensors(lambda t: t.detach().clone(), output)


class Benchmark:
    """One benchmark of ``model`` on ``batch``: fp32 first at each batch size, then each of
    ``variants``, their timed calls interleaved (see the module docs).

    ``recipe`` shapes the halfprec variants and, with ``tolerance`` (None: the recipe's),
    settles the tolerance each variant is judged by (:meth:`Recipe.settle`). ``options``:
    how long to measure. ``spec``: the MODEL spec ``model`` came from (CPU memory is then
    measured in a clean subprocess per variant). ``progress(step, total, label)`` is called
    before each variant. ``probe_timer`` and ``timer`` replace the wall clock of the
    slow-dtype probe and of the timed calls (tests pass scripted timings).
    ``keep_modules``: keep the warmed modules of the first batch size (deploy does).
    ``support``: the device's row of the device table (default
    :func:`~halfprec.dtypes.device_support`; tests pass another device's)."""

    def __init__(
        self,
        model: nn.Module,
        batch: Batch,
        *,
        variants: Sequence[Variant],
        recipe: Recipe | None = None,
        tolerance: Tolerance | None = None,
        options: BenchConfig | None = None,
        spec: str | None = None,
        progress: Progress | None = None,
        probe_timer: Timer | None = None,
        timer: CallTimer | None = None,
        keep_modules: bool = False,
        support: DeviceSupport | None = None,
    ) -> None:
        self.model, self.batch, self.variants = model, batch, list(variants)
        self.recipe = recipe or Recipe()
        self.config = options or BenchConfig()
        self.device = model_device(model)
        self.settled = self.recipe.settle(self.device, tolerance)
        self.spec, self.progress, self.keep_modules = spec, progress, keep_modules
        self.probe_timer = probe_timer
        self.timer: CallTimer = timer or (lambda fn, _variant: timed_call(fn, self.device))
        self.support = support or device_support(self.device)
        self.allocator = _allocator(self.device)
        self.skips: dict[torch.dtype, str] = {}
        self.slowdowns: dict[torch.dtype, float] = {}
        self.gemm_ratios: dict[torch.dtype, float] = {}  # eager half/fp32, first batch size
        self.measure_memory = self.config.memory != "none"
        self.shapes: dict[Gemm, int] = {}
        self.modules: dict[str, nn.Module] = {}
        self.notes: list[str] = []  # for the result's warnings
        self.built: dict[Variant, nn.Module] = {}  # reused at every batch size
        self.seconds: dict[str, float] = {}  # where the run's time went, by phase

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Adds the seconds spent inside to ``self.seconds[name]``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            self.seconds[name] = self.seconds.get(name, 0.0) + spent

    @property
    def half_dtypes(self) -> list[torch.dtype]:
        return list(dict.fromkeys(v.dtype for v in self.variants if v.dtype != torch.float32))

    def run(self, name: str = "") -> BenchRun:
        """Measure every variant at every batch size; the caller's model is evaluated in
        eval mode and given back in its own mode."""
        result = BenchResult(
            model=name or type(self.model).__name__,
            device=str(self.device),
            machine=machine_info(self.device),
            unit=self.config.unit,
        )
        ours = ("oneDNN",) if self.device.type == "cpu" else ("CUDA", "cuDNN")
        reduced = [r for r in reduced_fp32() if r.startswith(ours)]  # this device's backends
        if reduced:
            self.notes.append(
                f"this process computes {', '.join(reduced)}; every fp32 row and reference "
                "was computed in IEEE fp32 all the same (halfprec.fp32.exact_fp32)"
            )
        start = time.perf_counter()
        with evaluating(self.model):  # "done" too is reported before the flags come back
            sizes = self.config.batch_sizes or (batch_size_of(self.batch),)
            for index, size in enumerate(sizes):
                self._run_size(result, index, size, len(sizes))
            if self.progress is not None:
                total = len(sizes) * len(self.variants)
                self.progress(total, total, "done")
        result.warnings.extend(self.notes)
        self.built.clear()
        result.seconds = {**self.seconds, "total": time.perf_counter() - start}
        return BenchRun(result, self.modules)

    def _run_size(self, result: BenchResult, index: int, size: int, sizes: int) -> None:
        """Prepare, time and record every variant at one batch size."""
        mode = self.config.memory
        self.measure_memory = mode == "every" or (mode == "first" and index == 0)
        batch = resize_batch(self.batch, size)
        reference: Any = None
        prepared: list[Prepared] = []
        limits: dict[torch.dtype, GemmLimit] = {}
        for step, variant in enumerate(self.variants):
            if self.progress is not None:
                label = f"{variant.name} @ batch {size}"
                self.progress(index * len(self.variants) + step, sizes * len(self.variants), label)
            ready, output = self._prepare(variant, batch, size, reference)
            if variant == Variant("fp32"):
                reference = output
                if index == 0:
                    with self.phase("probe"):
                        self._probe()
                with self.phase("limit"):
                    limits = self._limits()
                result.limits[size] = limits
                for dt, lim in limits.items():
                    self.gemm_ratios.setdefault(dt, lim.ratio)
            prepared.append(ready)
        with self.phase("timing"):
            time_interleaved(prepared, batch, self.config.race, self.timer)
        fp32_median = prepared[0].result.median_s  # fp32 always comes first
        for ready in prepared:
            self._record(result, ready, fp32_median, limits, index)

    def _record(
        self,
        result: BenchResult,
        ready: Prepared,
        fp32_median: float | None,
        limits: dict[torch.dtype, GemmLimit],
        index: int,
    ) -> None:
        """Speedup, efficiency, memory and warnings of one timed variant."""
        r = ready.result
        if r.median_s and fp32_median:
            r.speedup = fp32_median / r.median_s
        lim = limits.get(r.variant.dtype)
        if r.speedup is not None and lim is not None and lim.ratio > 0:
            r.efficiency = r.speedup / lim.ratio
            if r.efficiency > 1.0 and r.status == "ok":
                result.warnings.append(_above_limit(r, lim))
        if self.keep_modules and index == 0 and ready.module is not None:
            self.modules[r.name] = ready.module
        self._memory_worker(r)
        result.results.append(r)
        if r.timing is not None and r.timing.spread > SPREAD_WARNING and r.status == "ok":
            result.warnings.append(
                f"{r.name} @ batch {r.batch_size}: runs spread {r.timing.spread:.0%} "
                "((p90-min)/median); the machine is busy, distrust small ratios"
            )

    def _memory_worker(self, r: VariantResult) -> None:
        """CPU peak memory of ``r``'s variant in a clean subprocess, where asked for."""
        measured = self.measure_memory and not r.variant.runtime  # no worker for those
        if measured and r.variant.compiled and self.allocator is None:
            measured = self.config.compiled_memory or self._note_compiled_memory()
        if measured and r.memory is None and r.status == "ok" and self.spec:
            with self.phase("memory"):
                r.memory = measure_in_subprocess(self.spec, r.variant, r.batch_size, self.recipe)

    def _note_compiled_memory(self) -> bool:
        """False, after noting once why a compiled variant's CPU memory is not measured."""
        note = (
            "compiled variants' memory is not measured on CPU: the clean subprocess would "
            "compile the model again (as long as the compile itself); --compiled-memory "
            "measures it"
        )
        if note not in self.notes:
            self.notes.append(note)
        return False

    # -- the probe and the limit -------------------------------------------------------------
    def _probe(self) -> None:
        """Probe each half dtype at the model's costliest product; skip it only when the
        probe is sure it is too slow (:func:`~halfprec.bench.limit.measure_slowdown`).
        A verdict cached for this machine (:mod:`halfprec.bench.probe_cache`) is used
        instead of probing again."""
        limit = self.config.skip_slower_than
        if limit is None:
            return
        gemm = probe_gemm(self.shapes)
        folder = cache_dir() if self.config.probe_cache and self.probe_timer is None else None
        cache = None if folder is None else ProbeCache(folder, machine_key(self.device))
        for dtype in self.half_dtypes:
            hit = None if cache is None else cache.get(dtype, gemm, limit)
            if hit is None:
                with exact_fp32():
                    probe = measure_slowdown(
                        dtype, self.device, gemm, give_up_at=limit, timer=self.probe_timer
                    )
                if cache is not None:
                    cache.put(probe, gemm, limit)
                source = ""
            else:
                probe, source = hit[0], f", cached {hit[1]}"
            self.slowdowns[dtype] = probe.ratio
            if probe.slow:
                self.skips[dtype] = (
                    f"{dtype_name(dtype)} matmuls run {probe.ratio:.1f}x slower than fp32 on "
                    f"this device (probe at {gemm.m}x{gemm.k}x{gemm.n}, at least "
                    f"{probe.low:.1f}x in {probe.rounds} rounds{source}; limit {limit:g}x)"
                )
        if cache is not None:
            self.notes.extend(cache.notes)

    def _limits(self) -> dict[torch.dtype, GemmLimit]:
        """Each half dtype's eager GEMM ratio at the shapes fp32 just recorded (the probe's
        ratio for a skipped dtype: timing it would take minutes)."""
        limits = {}
        for dtype in self.half_dtypes:
            if dtype in self.skips:
                limits[dtype] = GemmLimit(dtype, 1 / self.slowdowns[dtype], "probe", 1)
            elif self.config.limit:
                with exact_fp32():
                    limits[dtype] = measure_limit(
                        self.shapes, dtype, self.device, budget_s=self.config.limit_budget_s
                    )
        return limits

    # -- one variant: build, warm up, check ---------------------------------------------------
    def _skip_reason(self, variant: Variant) -> str | None:
        """Why ``variant`` is not run here: a runtime target's own reasons (torch's probe
        says nothing of it), a dtype the probe found slow, or a dtype the device's
        compiler does not compile (the row would run eager under a +compile label)."""
        if variant.runtime:
            return unavailable(variant.kind, variant.dtype, self.device)
        if variant.dtype in self.skips:
            return self.skips[variant.dtype]
        if variant.compiled and not self.support.compiles(variant.dtype):
            return (
                f"torch.compile does not compile {dtype_name(variant.dtype)} on "
                f"{self.support.name}: the +compile row would run eager; the eager row "
                "stands for it"
            )
        if variant.autotune:
            ratio = self.gemm_ratios.get(variant.dtype)
            if ratio is None and variant.dtype in self.slowdowns:
                ratio = 1 / self.slowdowns[variant.dtype]
            return autotune_pays(variant.dtype, self.device, ratio, self.support.features)
        return None

    def _build(self, variant: Variant, batch: Batch) -> nn.Module:
        """The variant's module: built (copied, converted, compiled) once, then reused."""
        module = self.built.get(variant)
        if module is None:
            with self.phase("build"):
                module = build_variant(self.model, variant, self.recipe, batch=batch)
            self.built[variant] = module
        return module

    def _prepare(
        self, variant: Variant, batch: Batch, size: int, reference: Any
    ) -> tuple[Prepared, Any]:
        """Build and warm one variant, compare its first output with fp32's, and plan its
        timed runs (0 when skipped, capped or failed). Returns the first output too."""
        skip = self._skip_reason(variant)
        if skip is not None:
            return Prepared(VariantResult(variant, size, "skipped", skip), None, 0), None
        gc.collect()
        reused = variant in self.built
        try:
            module = self._build(variant, batch)
        except Exception as exc:  # a variant that cannot be built is a finding
            failed = VariantResult(variant, size, "failed", f"build: {first_line(exc)}")
            return Prepared(failed, None, 0), None
        items = size * self.config.items_per_sample
        result = VariantResult(variant, size, "ok", items_per_call=items)
        result.model_bytes = nbytes(module)
        try:
            with self.phase("warm-up"), torch.inference_mode(), exact_fp32():
                warm = self._warm(module, batch, variant)
        except Exception as exc:
            if variant == Variant("fp32"):  # the user's own model refuses these inputs
                raise reference_failed(0, batch, exc) from exc
            self.built.pop(variant, None)
            result.status, result.note = "failed", first_line(exc)
            return Prepared(result, None, 0), None
        runs = self._plan(result, warm)
        self._device_memory(result, warm, reused)
        if reference is not None and warm.output is not None:
            with self.phase("compare"):
                judge = self.settled.judge(
                    None if variant.dtype == torch.float32 else variant.dtype
                )
                result.comparison = compare_outputs(
                    [reference], [warm.output], tolerance=judge, dtype=variant.dtype
                )
        return Prepared(result, module if runs else None, runs), warm.output

    def _plan(self, result: VariantResult, warm: _Warm) -> int:
        """The compile time and the number of timed runs (0: capped, timed once). Eager
        fp32 is never capped: every ratio is paired with its rounds, and one round ranks
        nothing; it runs at least 3 rounds, with a note."""
        cfg = self.config
        if result.variant.compiled:
            result.compile_s = warm.first
            self.seconds["compile"] = self.seconds.get("compile", 0.0) + warm.first
            self.seconds["warm-up"] -= warm.first  # counted once, as compile
        if warm.last > cfg.max_call_s and result.variant == Variant("fp32"):
            self.notes.append(
                f"fp32 @ batch {result.batch_size}: one call took {warm.last:.1f} s > cap "
                f"{cfg.max_call_s:g} s; timed 3 rounds all the same, since every speedup is "
                "paired with its rounds"
            )
            return 3
        if warm.last > cfg.max_call_s:
            result.status = "capped"
            result.timing = Timing((warm.last,))
            result.note = f"timed once: one call took {warm.last:.1f} s > cap {cfg.max_call_s:g} s"
            return 0
        return min(cfg.runs, max(3, int(cfg.max_variant_s / max(warm.last, 1e-9))))

    def _device_memory(self, result: VariantResult, warm: _Warm, reused: bool) -> None:
        """Peak device memory of the warm calls after the first (the compiling call's
        autotuning buffers are not the variant's), less what was allocated before."""
        if not (self.measure_memory and self.allocator is not None):
            return
        peak = int(self.allocator.max_memory_allocated(self.device)) - warm.before
        peak += result.model_bytes if reused else 0  # resident before, counted all the same
        result.memory = MemoryUse(peak, max(0, peak - result.model_bytes), "max_memory_allocated")

    def _reset_peak(self) -> int:
        """Reset the device's peak counter; the bytes allocated now (0 without counters)."""
        if self.allocator is None:
            return 0
        synchronize(self.device)
        self.allocator.reset_peak_memory_stats(self.device)
        return int(self.allocator.memory_allocated(self.device))

    def _warm(self, module: nn.Module, batch: Batch, variant: Variant) -> _Warm:
        """Warm-up calls; keeps a clone of the first output (:func:`_kept`) and the first
        and last calls' seconds. A compiled variant's first call compiles, so it gets at
        least one call after it (its warm speed plans its runs and the cap), and the peak
        memory counter is reset after it. Stops early when a call after the first (which
        may compile) exceeds the cap. The first call of uncompiled fp32 records the
        model's matrix products."""
        warm = _Warm(before=self._reset_peak())
        calls = max(self.config.warmup, 2) if variant.compiled else self.config.warmup
        for i in range(calls):
            record = i == 0 and variant == Variant("fp32")
            recorder = GemmRecorder() if record else contextlib.nullcontext()
            start = time.perf_counter()
            with recorder:
                out = call(module, batch)
            synchronize(self.device)
            warm.last = time.perf_counter() - start
            if isinstance(recorder, GemmRecorder):
                self.shapes = dict(recorder.seen)
            if i == 0:
                warm.output, warm.first = _kept(out), warm.last
                if variant.compiled:
                    warm.before = self._reset_peak()
            del out
            if warm.last > self.config.max_call_s and (i > 0 or not variant.compiled):
                break
        return warm


@dataclass
class _Warm:
    """What the warm-up calls of one variant left: the first output (cloned), the first
    and last calls' seconds, and the bytes allocated when the peak counter was reset."""

    before: int = 0
    output: Any = None
    first: float = 0.0
    last: float = 0.0


def _above_limit(r: VariantResult, lim: GemmLimit) -> str:
    return (
        f"{r.name} @ batch {r.batch_size}: {r.speedup:.2f}x fp32 is above its "
        f"{dtype_name(lim.dtype)} eager GEMM ratio {lim.ratio:.2f}x (efficiency "
        f"{r.efficiency:.2f}); that ratio times eager GEMM kernels and is no upper bound "
        "for compiled or fused ones (or the machine was noisy), so no efficiency is claimed"
    )


def benchmark(
    model: nn.Module,
    inputs: Any,
    recipe: RecipeLike = None,
    *,
    bench: BenchConfig | None = None,
    variants: Sequence[str | Variant] | None = None,
    compile: bool = False,
    tolerance: Tolerance | None = None,
    spec: str | None = None,
    name: str = "",
    progress: Progress | None = None,
    probe_timer: Timer | None = None,
    timer: CallTimer | None = None,
) -> BenchResult:
    """Time, size and compare each variant of ``model`` on the first batch of ``inputs``.

    ``recipe``: a :class:`Recipe` or a dtype. Its islands shape the halfprec variants; its
    dtype picks the default variants: ``"auto"`` (default) every candidate dtype
    (:func:`~halfprec.dtypes.candidate_dtypes`: fp16 and bf16 where the device runs
    them), an explicit dtype only that one. ``tolerance``: None for the recipe's
    (:meth:`Recipe.settle`). ``bench``: how long to measure. ``variants``: names such as
    ``"naive-bf16"`` or :class:`Variant` objects (fp32 always included);
    ``compile=True`` adds a ``torch.compile`` twin of each, and on CPU, with the default
    variants, a ``+autotune`` twin of each halfprec variant, skipped unless its dtype's
    GEMMs are native here (:func:`~halfprec.bench.variants.autotune_pays`). ``spec``: the MODEL spec
    ``model`` came from; with it, CPU peak memory is measured in a clean subprocess per
    variant (without it, CPU memory is not reported). ``progress(step, total, label)`` is
    called before each variant. ``probe_timer``: how the slow-dtype probe times a call
    (:data:`~halfprec.bench.limit.Timer`; default the wall clock, its result cached for
    the process and, with ``bench.probe_cache``, on disk per machine). ``timer``: how a
    timed call of a variant is timed (:data:`CallTimer`; default the wall clock).
    """
    chosen_recipe = Recipe.of(recipe)
    device = model_device(model)
    settled = chosen_recipe.settle(device, tolerance)
    texts = [v.name if isinstance(v, Variant) else v for v in variants] if variants else None
    chosen = parse_variants(texts, compile=compile, dtypes=settled.dtypes)
    if compile and texts is None and device.type in AUTOTUNE_RECIPES:  # tried where it pays
        twins = [v.with_compile(autotune=True) for v in chosen if v.kind == "halfprec"]
        chosen = list(dict.fromkeys(chosen + twins))
    engine = Benchmark(
        model,
        as_batches(inputs)[0],
        variants=chosen,
        recipe=chosen_recipe,
        tolerance=tolerance,
        options=bench,
        spec=spec,
        progress=progress,
        probe_timer=probe_timer,
        timer=timer,
    )
    return engine.run(name).result
