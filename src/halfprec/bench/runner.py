"""Speed, memory and accuracy of every way to run a model in half precision, side by side.

``benchmark(model, inputs)`` times each :class:`~halfprec.bench.variants.Variant`: median
and p90 latency after warm-up and throughput, with the variants' timed calls interleaved
round-robin so that load on a shared machine hits them alike, each variant raced
(:mod:`halfprec.bench.race`: no more rounds once its rank is settled). Each variant is
built once and reused at every batch size. It measures peak memory
(``max_memory_allocated`` on CUDA-like devices; on CPU the peak RSS of a clean subprocess
per variant, when the model is given as a MODEL spec), counts model bytes, and compares
each variant's outputs with fp32's on the same batch. The results are
:mod:`halfprec.bench.results`; ``fastest_variant`` there and
:func:`~halfprec.bench.choice.choose_dtype_by_measurement` turn the numbers into a choice:
the fastest variant that meets the tolerance, never one slower than fp32.

In the same run it measures the *limit* of each half dtype: the half/fp32 speed ratio of
the model's own matrix products, recorded during fp32's first warm-up call (see
:mod:`halfprec.bench.limit`); each variant's ``efficiency`` is its speedup over that
limit. A half dtype whose matrix products a quick probe finds ``skip_slower_than`` times
slower than fp32 is skipped, never timed (fp16 on CPUs without fp16 kernels).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch, as_batches, batch_size_of, call, resize_batch
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
from halfprec.bench.results import CHOICE_KINDS, BenchConfig, BenchResult, VariantResult
from halfprec.bench.variants import Variant, build_variant, parse_variants
from halfprec.bench.worker import MemoryUse, measure_in_subprocess
from halfprec.compare import Tolerance, compare_outputs, reference_failed
from halfprec.convert.core import ConfigLike, Recipe
from halfprec.dtypes import dtype_name
from halfprec.fp32 import exact_fp32
from halfprec.modules import evaluating, first_line, model_device, nbytes
from halfprec.runtimes import unavailable
from halfprec.timing import Timing, synchronize, timed_call

__all__ = ["CallTimer", "benchmark", "run_benchmark", "SPREAD_WARNING"]

SPREAD_WARNING = 0.2  # (p90 - min) / median above this: too noisy to trust small ratios

Progress = Callable[[int, int, str], None]

CallTimer = Callable[[Callable[[], object], Variant], float]
"""Times one timed call of a variant: ``timer(fn, variant) -> seconds``. The default calls
``fn`` and synchronises the device around a wall clock; tests pass scripted timings."""


def _allocator(device: torch.device) -> Any:
    """The device module with peak-allocation counters (torch.cuda, torch.xpu...), or None."""
    mod = getattr(torch, device.type, None)
    if mod is not None and hasattr(mod, "max_memory_allocated"):
        return mod
    return None


class _Runner:
    """Runs one benchmark: fp32 first at each batch size, then each variant."""

    def __init__(
        self,
        model: nn.Module,
        batch: Batch,
        variants: list[Variant],
        config: BenchConfig,
        convert_config: Recipe,
        tolerance: Tolerance | None,
        spec: str | None,
        progress: Progress | None,
    ) -> None:
        self.model, self.batch, self.variants, self.config = model, batch, variants, config
        self.tolerance, self.convert_config = tolerance, convert_config
        self.spec, self.progress = spec, progress
        self.device = model_device(model)
        self.allocator = _allocator(self.device)
        self.skips: dict[torch.dtype, str] = {}
        self.slowdowns: dict[torch.dtype, float] = {}
        self.measure_memory = config.memory != "none"
        self.shapes: dict[Gemm, int] = {}
        self.keep_modules = False
        self.modules: dict[str, nn.Module] = {}
        self.probe_timer: Timer | None = None
        self.timer: CallTimer | None = None
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
        """Each half dtype's GEMM limit at the shapes fp32 just recorded (the probe's ratio
        for a skipped dtype: timing it would take minutes)."""
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
            limits: dict[torch.dtype, GemmLimit] = {}
            for variant in self.variants:
                if self.progress is not None:
                    self.progress(step, total, f"{variant.name} @ batch {size}")
                r, module, output, runs = self._prepare(variant, batch, size, reference)
                if variant == Variant("fp32"):
                    reference = output
                    if index == 0:
                        with self.phase("probe"):
                            self._probe()
                    with self.phase("limit"):
                        limits = self._limits()
                    result.limits[size] = limits
                prepared.append((r, module, runs))
                step += 1
            with self.phase("timing"):
                self._time_interleaved(prepared, batch)
            fp32_median = prepared[0][0].median_s
            for r, module, _ in prepared:
                if r.median_s and fp32_median:
                    r.speedup = fp32_median / r.median_s
                lim = limits.get(r.variant.dtype)
                if r.speedup is not None and lim is not None and lim.ratio > 0:
                    r.efficiency = r.speedup / lim.ratio
                if self.keep_modules and index == 0 and module is not None:
                    self.modules[r.name] = module
                measured = self.measure_memory and not r.variant.runtime  # no worker for those
                if measured and r.variant.compiled and self.allocator is None:
                    measured = self.config.compiled_memory or self._note_compiled_memory()
                if measured and r.memory is None and r.status == "ok" and self.spec:
                    with self.phase("memory"):
                        r.memory = measure_in_subprocess(
                            self.spec, r.variant, size, self.convert_config
                        )
                result.results.append(r)
                if r.timing is not None and r.timing.spread > SPREAD_WARNING and r.status == "ok":
                    result.warnings.append(
                        f"{r.name} @ batch {size}: runs spread {r.timing.spread:.0%} "
                        "((p90-min)/median); the machine is busy, distrust small ratios"
                    )
        result.warnings.extend(self.notes)
        self.built.clear()
        if self.progress is not None:
            self.progress(total, total, "done")

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

    def _time_interleaved(
        self, prepared: list[tuple[VariantResult, nn.Module | None, int]], batch: Batch
    ) -> None:
        """Time the variants round-robin, one call each per round, so that a burst of load
        on a shared machine hits every variant alike instead of one variant's median.

        With ``config.race`` (the default) a variant stops once its rank is settled
        (:class:`~halfprec.bench.race.Race`: beaten by a variant the choice may pick, or
        apart from all others). fp32, the reference every speedup is measured against,
        is timed in every round any other variant is, and the others stop when it stops:
        a round without it cannot be paired. fp32 timed alone (nothing else to time) stops
        after the race's ``min_rounds``."""
        modules = {
            i: m for i, (r, m, n) in enumerate(prepared) if m is not None and n and r.status == "ok"
        }
        samples: dict[int, list[float]] = {i: [] for i in modules}
        ref = next((i for i in modules if prepared[i][0].variant == Variant("fp32")), None)
        race = self.config.race
        stopped: set[int] = set()
        timer = self.timer or (lambda fn, _variant: timed_call(fn, self.device))

        def plays(i: int, round_: int) -> bool:
            r, _, runs = prepared[i]
            return i not in stopped and round_ < runs and r.status == "ok"

        with torch.inference_mode(), exact_fp32():
            for round_ in range(max((prepared[i][2] for i in modules), default=0)):
                now = [i for i in modules if plays(i, round_)]
                if race is not None and ref is not None:
                    others = [i for i in now if i != ref] if ref in now else []
                    paired = any(samples[i] for i in modules if i != ref)
                    alone = ref in now and not paired and len(samples[ref]) < race.min_rounds
                    now = sorted(others + ([ref] if others or alone else []))
                if not now:
                    break
                for i in now:
                    r = prepared[i][0]
                    try:
                        samples[i].append(
                            timer(functools.partial(call, modules[i], batch), r.variant)
                        )
                    except Exception as exc:
                        r.status = "failed"
                        r.note = first_line(exc)
                if race is not None:
                    rows = {i: prepared[i][0] for i in modules}
                    eligible = {
                        i
                        for i, r in rows.items()
                        if r.status == "ok" and r.accurate and r.variant.kind in CHOICE_KINDS
                    }
                    timed = {i: samples[i] for i in modules if samples[i]}
                    stopped |= race.settled(timed, eligible) - {ref}
        for i, r_samples in samples.items():
            r = prepared[i][0]
            if r.status == "ok" and r_samples:
                r.timing = Timing(tuple(r_samples))

    def _prepare(
        self, variant: Variant, batch: Batch, size: int, reference: Any
    ) -> tuple[VariantResult, nn.Module | None, Any, int]:
        """Build and warm one variant, compare its first output with fp32's, and plan its
        timed runs (0 when skipped, capped or failed)."""
        cfg = self.config
        items = size * cfg.items_per_sample
        # a runtime target's own reasons (torch's slow-dtype probe says nothing of it)
        skip = (
            unavailable(variant.kind, variant.dtype, self.device)
            if variant.runtime
            else self.skips.get(variant.dtype)
        )
        if skip is not None:
            return VariantResult(variant, size, "skipped", skip), None, None, 0
        gc.collect()
        # the fp32 original and the reference outputs stay resident; count only the variant
        before = 0 if self.allocator is None else int(self.allocator.memory_allocated(self.device))
        module = self.built.get(variant)
        reused = module is not None
        if module is None:
            try:
                with self.phase("build"):
                    module = build_variant(self.model, variant, self.convert_config, batch=batch)
            except Exception as exc:  # a variant that cannot be built is a finding
                failed = VariantResult(variant, size, "failed", f"build: {first_line(exc)}")
                return failed, None, None, 0
            self.built[variant] = module
        result = VariantResult(variant, size, "ok", items_per_call=items)
        result.model_bytes = nbytes(module)
        if self.allocator is not None:
            synchronize(self.device)
            self.allocator.reset_peak_memory_stats(self.device)
        runs = 0
        try:
            with self.phase("warm-up"), torch.inference_mode(), exact_fp32():
                output, first, last = self._warm(module, batch, variant)
        except Exception as exc:
            if variant == Variant("fp32"):  # the user's own model refuses these inputs
                raise reference_failed(0, batch, exc) from exc
            self.built.pop(variant, None)
            result.status = "failed"
            result.note = first_line(exc)
            return result, None, None, 0
        if variant.compiled:
            result.compile_s = first
            self.seconds["compile"] = self.seconds.get("compile", 0.0) + first
            self.seconds["warm-up"] -= first  # counted once, as compile
        if last > cfg.max_call_s:
            result.status = "capped"
            result.timing = Timing((last,))
            result.note = f"timed once: one call took {last:.1f} s > cap {cfg.max_call_s:g} s"
        else:
            runs = min(cfg.runs, max(3, int(cfg.max_variant_s / max(last, 1e-9))))
        if self.measure_memory and self.allocator is not None:
            peak = int(self.allocator.max_memory_allocated(self.device)) - before
            peak += result.model_bytes if reused else 0  # resident before, counted all the same
            result.memory = MemoryUse(
                peak, max(0, peak - result.model_bytes), "max_memory_allocated"
            )
        if reference is not None and output is not None:
            tol = self.tolerance
            dtype = None if variant.dtype == torch.float32 else variant.dtype
            with self.phase("compare"):
                result.comparison = compare_outputs(
                    [reference], [output], tolerance=tol, dtype=dtype
                )
        return result, (module if runs else None), output, runs

    def _warm(self, module: nn.Module, batch: Batch, variant: Variant) -> tuple[Any, float, float]:
        """Warm-up calls; returns the first output and the first and last calls' seconds.
        A compiled variant's first call compiles, so it gets at least one call after it
        (its warm speed plans its runs and the cap). Stops early when a call after the
        first (which may compile) exceeds the cap. The first call of uncompiled fp32
        records the model's matrix products."""
        output: Any = None
        first = last = 0.0
        calls = max(self.config.warmup, 2) if variant.compiled else self.config.warmup
        for i in range(calls):
            record = i == 0 and variant == Variant("fp32")
            recorder = GemmRecorder() if record else contextlib.nullcontext()
            start = time.perf_counter()
            with recorder:
                out = call(module, batch)
            synchronize(self.device)
            last = time.perf_counter() - start
            if isinstance(recorder, GemmRecorder):
                self.shapes = dict(recorder.seen)
            if i == 0:
                output, first = out, last
            if last > self.config.max_call_s and (i > 0 or not variant.compiled):
                break
        return output, first, last


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
    probe_timer: Timer | None = None,
    timer: CallTimer | None = None,
) -> BenchResult:
    """Time, size and compare each variant of ``model`` on the first batch of ``inputs``.

    ``config``: a :class:`Recipe` or a dtype. Its islands shape the halfprec
    variants; its dtype picks the default variants: ``"auto"`` (default) every candidate
    dtype (:func:`~halfprec.dtypes.candidate_dtypes`: fp16 and bf16 where the device runs
    them), an explicit dtype only that one. ``bench``: how long to measure.
    ``variants``: names such as ``"naive-bf16"`` or :class:`Variant` objects (fp32 always
    included); ``compile=True`` adds a ``torch.compile`` twin of each.
    ``spec``: the MODEL spec ``model`` came from; with it, CPU peak memory is measured in a
    clean subprocess per variant (without it, CPU memory is not reported).
    ``progress(step, total, label)`` is called before each variant. ``probe_timer``: how
    the slow-dtype probe times a call (:data:`~halfprec.bench.limit.Timer`; default the
    wall clock, its result cached for the process and, with ``bench.probe_cache``, on
    disk per machine). ``timer``: how a timed call of a variant is timed
    (:data:`CallTimer`; default the wall clock).
    """
    cfg = Recipe.of(config)
    options = bench or BenchConfig()
    device = model_device(model)
    texts = [v.name if isinstance(v, Variant) else v for v in variants] if variants else None
    chosen = parse_variants(texts, compile=compile, dtypes=cfg.candidates(device))
    tol = tolerance if tolerance is not None else cfg.tolerance  # the recipe's by default
    runner = _Runner(model, as_batches(inputs)[0], chosen, options, cfg, tol, spec, progress)
    runner.probe_timer, runner.timer = probe_timer, timer
    return run_benchmark(runner, name)[0]


def run_benchmark(runner: _Runner, name: str = "") -> tuple[BenchResult, dict[str, nn.Module]]:
    """Run a prepared benchmark; also returns, when ``runner.keep_modules`` is set, the
    warmed modules of the first batch size by variant name, so that a caller can keep the
    winner without building or compiling it again."""
    model, options = runner.model, runner.config
    device = model_device(model)
    result = BenchResult(
        model=name or type(model).__name__,
        device=str(device),
        machine=machine_info(device),
        unit=options.unit,
    )
    start = time.perf_counter()
    with evaluating(model):
        runner.run(result)
    result.seconds = {**runner.seconds, "total": time.perf_counter() - start}
    return result, runner.modules
