"""Speed, memory and accuracy of every way to run a model in half precision, side by side.

:class:`Benchmark` (and the verb ``benchmark(model, inputs)``) times each
:class:`~halfprec.bench.variants.Variant` after warm-up against eager fp32, measures peak
memory (``max_memory_allocated`` on CUDA-like devices, the peak RSS of a clean subprocess
per variant on CPU given a MODEL spec) and compares each variant's outputs with fp32's by
the settled tolerance. In the same run it measures each half dtype's eager GEMM ratio
(:mod:`halfprec.bench.limit`; ``efficiency`` is a speedup over it) and skips a dtype whose
products a quick probe finds ``skip_slower_than`` times slower than fp32.
:func:`~halfprec.bench.results.fastest_variant` turns the numbers into a choice.

It holds at most the caller's model and one candidate (deploy: and the best so far), never
every variant: eager fp32 is the caller's model itself, not a copy. First, at each batch
size, fp32 is warmed up (its first call records the model's matrix products for the probe
and the limit) and its outputs are kept as the reference (computed in IEEE fp32,
:func:`~halfprec.fp32.exact_fp32`, when the caller's settings compute fp32 in less). Every
warm-up and timing runs under the caller's own settings, as the user's model runs (recorded
in :attr:`MachineInfo.fp32`); a compiled candidate is thus warmed, and compiled, under the
settings it will be called with. Then each candidate in turn is
built once, and at each batch size warmed, compared with that size's reference and timed
in a pair with fp32 (their calls alternating round by round,
:func:`~halfprec.bench.interleave.time_interleaved`), then released before the next is
built. A candidate's speedup is fp32's median over the rounds of its own pair / its
median; the race ranks candidates of different pairs by their times relative to fp32's in
the same round. fp32's row pools its calls from every pair.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch, as_batches, batch_size_of, call, resize_batch
from halfprec.bench.budget import LIFT, Budget
from halfprec.bench.compile_gate import CompileGate, Twin, gemm_share
from halfprec.bench.deadline import Overrun, deadline
from halfprec.bench.half_speed import HalfSpeed
from halfprec.bench.heap import caller_objects_set_aside
from halfprec.bench.interleave import CallTimer, Pairs, Prepared
from halfprec.bench.limit import Gemm, GemmLimit, Timer
from halfprec.bench.machine import machine_info
from halfprec.bench.order import by_expected_gain, timing_order
from halfprec.bench.phases import Phases
from halfprec.bench.prewarm import Prewarm, Setup, compiler_setup
from halfprec.bench.results import (
    BenchConfig,
    BenchResult,
    BenchRun,
    VariantResult,
    fastest_variant,
)
from halfprec.bench.runtime_choice import with_runtimes
from halfprec.bench.steady import steady_call_time
from halfprec.bench.variants import (
    AUTOTUNE_RECIPES,
    Variant,
    autotune_pays,
    build_variant,
    parse_variants,
)
from halfprec.bench.warmup import PeakCounters, Warmed, WarmUp, device_counters, kept
from halfprec.bench.worker import measure_in_subprocesses, parallel_workers
from halfprec.compare import Tolerance, compare_outputs, reference_failed
from halfprec.convert.recipe import Recipe, RecipeLike
from halfprec.dtypes import DeviceSupport, device_support, dtype_name
from halfprec.fp32 import exact_fp32, fp32_settings, reduced_fp32
from halfprec.modules import evaluating, first_line, model_device, nbytes
from halfprec.timing import Timing, synchronize

__all__ = ["Benchmark", "benchmark", "SPREAD_WARNING"]

SPREAD_WARNING = 0.2  # (p90 - min) / median above this: too noisy to trust small ratios

Progress = Callable[[int, int, str], None]
RowDone = Callable[[VariantResult], None]
"""Called with each variant's row at a batch size once it is built, compared and timed."""

_FP32 = Variant("fp32")


@dataclass
class _Size:
    """One batch size: eager fp32 (the caller's model) warmed there and its pairs with the
    candidates (``pairs``), its first output (``output``: what every candidate is compared
    with) and the half dtypes' GEMM limits."""

    index: int
    pairs: Pairs
    output: Any
    limits: dict[torch.dtype, GemmLimit]

    @property
    def size(self) -> int:
        return self.pairs.fp32.result.batch_size

    @property
    def batch(self) -> Batch:
        return self.pairs.batch


class Benchmark:
    """One benchmark of ``model`` on ``batch``: eager fp32 (``model`` itself) at each batch
    size, then each other of ``variants`` in turn, timed in pairs with fp32 and released
    before the next is built (see the module docs). ``variants`` must hold
    ``Variant("fp32")``, the reference.

    ``recipe`` shapes the halfprec variants and, with ``tolerance`` (None: the recipe's),
    settles the tolerance each variant is judged by (:meth:`Recipe.settle`). ``options``:
    how long to measure. ``spec``: the MODEL spec ``model`` came from (CPU memory is then
    measured in a clean subprocess per variant). ``progress(step, total, label)`` is called
    before each variant at each batch size. ``probe_timer`` and ``timer`` replace the wall
    clock of the slow-dtype probe and of the timed calls (tests pass scripted timings).
    ``keep_modules``: keep the warmed module of the choice at the first batch size, and
    only that one (deploy does; :class:`~halfprec.bench.results.BenchRun`); its fp32
    variants are then built from a copy, since the module outlives the run.
    ``support``: the device's row of the device table (default
    :func:`~halfprec.dtypes.device_support`; tests pass another device's). ``counters``:
    the device's allocation counters peak memory is read from (default the device module,
    e.g. ``torch.cuda``, where it has them: :func:`~halfprec.bench.warmup.device_counters`;
    tests pass a stand-in). ``prewarm``: the compiler's one-time setup, run in the
    background from the first compiled candidate's build until before the next timed call
    (default :func:`~halfprec.bench.prewarm.compiler_setup`'s; tests pass their own).
    ``budget``: the seconds the run may start candidates in (default ``options.budget_s``
    on the wall clock: :mod:`halfprec.bench.budget`; tests pass scripted clocks)."""

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
        row_done: RowDone | None = None,
        probe_timer: Timer | None = None,
        timer: CallTimer | None = None,
        keep_modules: bool = False,
        support: DeviceSupport | None = None,
        counters: PeakCounters | None = None,
        prewarm: Setup | None = None,
        budget: Budget | None = None,
    ) -> None:
        if _FP32 not in variants:
            raise ValueError(
                "Benchmark(variants=...) needs Variant('fp32'): every speedup is measured "
                "against it"
            )
        self.model, self.batch = model, batch
        others = [v for v in dict.fromkeys(variants) if v != _FP32]
        # the report's order: every uncompiled candidate before any compiled one; they
        # are timed in ``order`` (halfprec.bench.order: eager twins first, the likely
        # fastest first)
        self.variants = [_FP32] + sorted(others, key=lambda v: v.compiled)
        self.order = timing_order(self.variants)
        self.recipe = recipe or Recipe()
        self.config = options or BenchConfig()
        self.device = model_device(model)
        self.settled = self.recipe.settle(self.device, tolerance)
        self.spec, self.progress, self.keep_modules = spec, progress, keep_modules
        self.row_done = row_done
        self.timer: CallTimer = timer or (lambda fn, _variant: steady_call_time(fn, self.device))
        self.support = support or device_support(self.device)
        self.gate = CompileGate(self.device, self.config.race)
        self.prewarm = Prewarm(prewarm or compiler_setup(self.device))
        self.warm_up = WarmUp(
            device=self.device,
            calls=self.config.warmup,
            max_call_s=self.config.max_call_s,
            counters=device_counters(self.device) if counters is None else counters,
        )
        half = [v.dtype for v in self.variants if v.dtype != torch.float32]
        self.half = HalfSpeed(
            device=self.device,
            dtypes=list(dict.fromkeys(half)),
            config=self.config,
            probe_timer=probe_timer,
            support=self.support,
        )
        self.shapes: dict[Gemm, int] = {}
        # eager fp32's distinct operations, and its call: the warm-up's, then its fastest round
        self.ops, self.calls, self.call_s = 0, 0, 0.0
        self.convolutions = 0  # eager fp32's calls of convolutions (the compile estimate's)
        self.yardstick: Batch | None = None  # the batch to time fp32's call on, once
        self.budget = budget or Budget.of(self.config)
        self.modules: dict[str, nn.Module] = {}
        self.notes: list[str] = []  # for the result's warnings
        self.rows: dict[tuple[int, int], VariantResult] = {}  # by (size index, variant index)
        self.phases = Phases()  # where the run's time went, by phase: wall and CPU
        self.step = 0

    @property
    def seconds(self) -> dict[str, float]:
        """Wall seconds by phase so far."""
        return self.phases.wall

    def phase(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Adds the wall and CPU seconds spent inside to phase ``name``."""
        return self.phases.phase(name)

    def _measures_memory(self, index: int) -> bool:
        mode = self.config.memory
        return mode == "every" or (mode == "first" and index == 0)

    def _set_row(self, index: int, j: int, row: VariantResult) -> None:
        """Variant ``j``'s row at batch size ``index``, handed to ``row_done``."""
        self.rows[index, j] = row
        if self.row_done is not None:
            self.row_done(row)

    def _report(self, label: str, sizes: int) -> None:
        """The progress callback, one step further."""
        if self.progress is not None:
            self.progress(self.step, sizes * len(self.variants), label)
        self.step += 1

    def run(self, name: str = "") -> BenchRun:
        """Measure every variant at every batch size; the caller's model is evaluated in
        eval mode and given back in its own mode."""
        result = BenchResult(
            model=name or type(self.model).__name__,
            device=str(self.device),
            machine=machine_info(self.device),
            unit=self.config.unit,
            budget_s=self.budget.seconds,
            budget_spent_s=self.budget.spent,
            budget_reserve_s=self.budget.reserve_s,
        )
        self._note_reduced_fp32()
        start, cpu = time.perf_counter(), self.phases.cpu_clock()
        # "done" too is reported before the flags come back; the caller's objects are not
        # walked by the run's collections (halfprec.bench.heap)
        with evaluating(self.model), caller_objects_set_aside():
            sizes = self.config.batch_sizes or (batch_size_of(self.batch),)
            at = [
                self._reference(result, index, size, len(sizes)) for index, size in enumerate(sizes)
            ]
            eager = [j for j in self.order if not self.variants[j].compiled]
            for j in eager:
                self._candidate(result, at, j, self.variants[j])
            for j in self._compile_order(at, eager):  # ordered by the eager twins' rounds
                self._candidate(result, at, j, self.variants[j])
            self._finish(result, at)
            if self.progress is not None:
                total = len(sizes) * len(self.variants)
                self.progress(total, total, "done")
        result.warnings.extend(self.notes)
        result.seconds = {**self.phases.wall, "total": time.perf_counter() - start}
        result.cpu_seconds = {**self.phases.cpu, "total": self.phases.cpu_clock() - cpu}
        return BenchRun(result, self.modules)

    def _note_reduced_fp32(self) -> None:
        if self._reduced():
            self.notes.append(
                f"fp32 was timed as this process runs it ({fp32_settings(self.device)}); "
                "every reference was computed in IEEE fp32 (halfprec.fp32.exact_fp32)"
            )

    def _reduced(self) -> list[str]:
        """The caller's settings that compute fp32 in less than IEEE on this device."""
        ours = ("oneDNN",) if self.device.type == "cpu" else ("CUDA", "cuDNN")
        return [r for r in reduced_fp32() if r.startswith(ours)]

    def _reference(self, result: BenchResult, index: int, size: int, sizes: int) -> _Size:
        """Eager fp32 at one batch size: warmed (its first call at the first size records
        the products the probe and the limits time), its output kept as the reference."""
        batch = resize_batch(self.batch, size)
        self._report(f"{_FP32.name} @ batch {size}", sizes)
        ready, output = self._prepare(_FP32, batch, size, index, self.model, None)
        if self._reduced():  # warmed as the caller runs it; the reference is IEEE fp32
            with self.phase("warm-up"), torch.inference_mode(), exact_fp32():
                output = kept(call(self.model, batch))
        limits: dict[torch.dtype, GemmLimit] = {}
        if self.budget.over and self.half.dtypes:  # no candidate will start: nothing to probe
            self.notes.append(
                f"the half dtypes were not probed: {self.budget.spent_text()} by fp32 @ "
                f"batch {size}; {LIFT}"
            )
        else:
            if index == 0:
                with self.phase("probe"):
                    self.notes.extend(self.half.probe(self.shapes))
            with self.phase("limit"):
                limits = self.half.limits(self.shapes, self.budget.share(len(self.half.dtypes)))
        result.limits[size] = limits
        self._set_row(index, 0, ready.result)
        return _Size(index, Pairs(fp32=ready, batch=batch), output, limits)

    def _candidate(self, result: BenchResult, at: list[_Size], j: int, variant: Variant) -> None:
        """Build ``variant`` once; at each batch size warm it, compare it with that size's
        reference and time it in a pair with fp32; then keep it (deploy's best so far) or
        release it."""
        built: nn.Module | VariantResult | None = None
        tried = False  # a build was attempted: something to collect on release
        for size in at:
            self._report(f"{variant.name} @ batch {size.size}", len(at))
            skip = self._skip_reason(variant, at)
            if skip is not None:
                self._set_row(size.index, j, VariantResult(variant, size.size, "skipped", skip))
                continue
            if built is None:
                if variant.compiled:  # beside the build and compile; joined before timing
                    self.prewarm.start()
                built, tried = self._build(variant, size.batch), True
            if isinstance(built, VariantResult):  # the build failed: the same at every size
                self._set_row(size.index, j, replace(built, batch_size=size.size))
                continue
            ready, _ = self._prepare(variant, size.batch, size.size, size.index, built, size.output)
            if ready.timed:
                self.prewarm.join()
                with self.phase("timing"):
                    size.pairs.time(ready, self.config.race, self.timer)
                if size.index == 0 and size.pairs.rounds:  # warm now: the budget's yardstick
                    self.call_s, self.yardstick = min(size.pairs.rounds), None
            elif ready.result.status == "failed":  # a failed warm-up: built afresh next size
                built = None
            self._set_row(size.index, j, ready.result)
            del ready
        self._keep(result, variant, built if isinstance(built, nn.Module) else None)
        del built
        if tried:  # a skipped candidate built nothing, so left nothing to free
            self._release()

    def _build(self, variant: Variant, batch: Batch) -> nn.Module | VariantResult:
        """The variant's module, built (copied, converted, compiled) once for every batch
        size (an fp32 variant shares the caller's model unless kept past the run), or the
        row of a build that failed. What the candidate before it held was collected when
        it was released (:meth:`_release`)."""
        start = time.perf_counter()
        try:
            within = self._compile_within() if variant.runtime else None
            with self.phase("build"), deadline(within):
                share = not self.keep_modules
                return build_variant(self.model, variant, self.recipe, batch=batch, share=share)
        except Overrun:  # a runtime's conversion past the seconds left: abandoned
            ran = time.perf_counter() - start
            return VariantResult(variant, 0, "skipped", self.budget.build_stopped(ran))
        except Exception as exc:  # a variant that cannot be built is a finding
            return VariantResult(variant, 0, "failed", f"build: {first_line(exc)}")

    def _keep(self, result: BenchResult, variant: Variant, module: nn.Module | None) -> None:
        """With ``keep_modules``: keep ``module`` if ``variant`` is now the choice at the
        first batch size, and drop a kept one that no longer is."""
        if not self.keep_modules:
            return
        self._sync(result)
        best = with_runtimes(result, fastest_variant(result)).variant
        if best == variant and module is not None:
            self.modules = {variant.name: module}
        elif best.name not in self.modules:
            self.modules = {}

    def _release(self) -> None:
        """Free what a released candidate held: collect it, and return the device
        allocator's cached blocks (``torch.cuda.empty_cache()`` and its kin). Once per
        candidate built: a full collection walks every object of the process (a few tenths
        of a second once transformers and a compile are loaded)."""
        gc.collect()
        if self.device.type != "cpu":
            empty = getattr(getattr(torch, self.device.type, None), "empty_cache", None)
            if callable(empty):
                empty()

    def _sync(self, result: BenchResult) -> None:
        """The result's rows so far, in the report's order: by batch size, then variant."""
        result.results = [self.rows[k] for k in sorted(self.rows)]

    def _finish(self, result: BenchResult, at: list[_Size]) -> None:
        """fp32 alone where nothing was paired with it (not once the budget is spent: its
        rounds would rank nothing); fp32's timing pooled from its pairs; then every row's
        speedup, efficiency and memory, in the report's order."""
        self.prewarm.join()
        for size in at:
            rounds = functools.partial(self._rounds_s, measure=False)  # no call for this
            late = None if size.pairs.rounds else self.budget.skip(_FP32, 0, rounds)
            if late is not None:
                self.notes.append(f"fp32 @ batch {size.size} was not timed alone: {late}")
                continue
            with self.phase("timing"):
                size.pairs.pool(self.config.race, self.timer)
        if any(size.pairs.pairs > 1 for size in at):
            self.notes.append(_POOLED)
        self._sync(result)
        by_size = {size.size: size for size in at}
        for r in result.results:
            self._record(result, r, by_size[r.batch_size])
        self._memory_workers([r for r in result.results if self._wants_worker(r, by_size)])
        busy = _spread_warning(result.results)
        if busy is not None:
            result.warnings.append(busy)

    def _record(self, result: BenchResult, r: VariantResult, size: _Size) -> None:
        """Speedup, efficiency, memory and warnings of one row. The speedup is over fp32's
        calls in the row's own pair (fp32's pooled calls for a row timed in no pair)."""
        fp32 = r.reference_timing or size.pairs.fp32.result.timing
        if r.median_s and fp32 is not None and fp32.median:
            r.speedup = fp32.median / r.median_s
        lim = size.limits.get(r.variant.dtype)
        if r.speedup is not None and lim is not None and lim.ratio > 0:
            r.efficiency = r.speedup / lim.ratio
            if r.efficiency > 1.0 and r.status == "ok":
                result.warnings.append(_above_limit(r, lim))

    def _wants_worker(self, r: VariantResult, by_size: dict[int, _Size]) -> bool:
        """Whether ``r``'s CPU peak memory is measured in a clean subprocess."""
        measured = self._measures_memory(by_size[r.batch_size].index) and not r.variant.runtime
        if measured and r.variant.compiled and self.warm_up.counters is None:
            measured = self.config.compiled_memory or self._note_compiled_memory()
        return measured and r.memory is None and r.status == "ok" and self.spec is not None

    def _memory_workers(self, rows: list[VariantResult]) -> None:
        """The rows' CPU peak memory, each in a clean subprocess, as many at once as the
        cores and memory allow (:func:`~halfprec.bench.worker.parallel_workers`): every
        timing is over, and each measures its own process's peak."""
        if not rows or self.spec is None:
            return
        if self.budget.over:  # subprocesses started now would run past it by their length
            self.notes.append(
                f"memory not measured: {self.budget.spent_text()} before its subprocesses "
                f"would start; {LIFT}"
            )
            return
        jobs = [(r.variant, r.batch_size) for r in rows]
        workers = parallel_workers(nbytes(self.model), len(jobs))
        with self.phase("memory"):
            found = measure_in_subprocesses(
                self.spec, jobs, self.recipe, workers, stop=self._memory_stop
            )
        for r, memory in zip(rows, found, strict=True):
            r.memory = memory
        stopped = [r for r in rows if r.memory is not None and r.memory.note.startswith(_STOPPED)]
        if stopped:
            names = ", ".join(f"{r.name} @ batch {r.batch_size}" for r in stopped)
            why = next(m.note for m in found if m.note.startswith(_STOPPED))
            self.notes.append(f"memory not measured for {names}: {why}")

    def _memory_stop(self) -> str | None:
        """Why a memory subprocess is stopped now: the time budget is spent (None: it runs
        on). A stopped one is killed with every process it started, and leaves no file."""
        if not self.budget.over:
            return None
        return f"{_STOPPED}{self.budget.spent_text()}; {LIFT}"

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

    # -- one variant: warm up, check, plan ---------------------------------------------------
    def _skip_reason(self, variant: Variant, at: list[_Size]) -> str | None:
        """Why ``variant`` is not run here: a runtime target's own reasons (torch's probe
        says nothing of it), a dtype the probe found slow, a dtype the device's compiler
        does not compile (the row would run eager under a +compile label), or a compiled
        twin that cannot win by its eager twin's measurement (:class:`CompileGate`)."""
        why = variant.way.unavailable(variant.dtype, self.device)
        if why is not None:
            return why
        if variant.runtime:  # torch's probe says nothing of it; the budget bounds it
            return self.budget.skip(variant, self.ops, self._rounds_s, self.calls)
        if variant.dtype in self.half.skips:
            return self.half.skips[variant.dtype]
        if variant.compiled and not self.support.compiles(variant.dtype):
            return (
                f"torch.compile does not compile {dtype_name(variant.dtype)} on "
                f"{self.support.name}: the +compile row would run eager; the eager row "
                "stands for it"
            )
        if variant.autotune:
            ratio = self.half.ratio(variant.dtype)
            why = autotune_pays(variant.dtype, self.device, ratio, self.support.features)
            if why is not None:
                return why
        gated = self.gate.skip(variant, self._twins(variant, at))
        return gated or self.budget.skip(
            variant, self.ops, self._rounds_s, self.calls, convolved=self.convolutions > 0
        )

    def _compile_within(self) -> float | None:
        """The seconds a build or a compile may run: what is left of the budget less its
        rounds (the end's re-timing included; None: no bound). Past them it is stopped
        (:mod:`halfprec.bench.deadline`): an estimate that read low, or a runtime's
        conversion (OpenVINO's of BERT-base: tens of seconds under load), costs the seconds
        it ran, not an overrun."""
        if self.budget.seconds is None:
            return None
        return self.budget.left - self._rounds_s(measure=False)

    def _rounds_s(self, measure: bool = True) -> float:
        """A candidate's rounds and the end's re-timing, from eager fp32's call: its fastest
        timed round, else (once, while the budget has seconds left) one more call of it
        timed on the budget's clock, since its one warm-up call is cold (BERT-base b8 at
        load 5: 14 s, where a warm call takes about 2 s)."""
        left = self.budget.seconds is not None and not self.budget.over
        if measure and self.yardstick is not None and left:
            batch, self.yardstick = self.yardstick, None
            with self.phase("warm-up"), torch.inference_mode():
                start = self.budget.clock()
                call(self.model, batch)
                synchronize(self.device)
                self.call_s = self.budget.clock() - start
        race = self.config.race
        rounds = self.config.runs if race is None else race.min_rounds
        return Budget.rounds_s(self.call_s, rounds, 0.0 if race is None else 2 * race.claim_s)

    def _compile_order(self, at: list[_Size], eager: list[int]) -> list[int]:
        """The compiled candidates, the one whose eager twin's fastest round sped up by
        the most compiling gains (:class:`CompileGate`) is fastest first: where the budget
        cannot hold every compile, the likeliest winner is compiled (:mod:`~halfprec.bench.
        order`)."""
        compiled = [j for j in self.order if j not in eager]
        size = at[0]

        def expected(v: Variant) -> float | None:
            twin = Variant(v.kind, v.dtype)
            rel = [1.0] if twin == _FP32 else size.pairs.standings.relative.get(twin)
            gain = self.gate.gain(v, self._gemm_share(size) if twin == _FP32 else None)
            return None if not rel or gain is None else min(rel) / gain

        return by_expected_gain(compiled, [self.variants[j] for j in compiled], expected)

    def _twins(self, variant: Variant, at: list[_Size]) -> list[Twin]:
        """The eager twin of compiled ``variant`` at each batch size (none without one)."""
        eager = Variant(variant.kind, variant.dtype)
        if not variant.compiled or eager not in self.variants:
            return []
        j = self.variants.index(eager)
        return [
            Twin(
                self.rows.get((size.index, j)),
                size.pairs.standings,
                self._gemm_share(size) if eager == _FP32 else None,
                self._accurate_runtimes(size),
            )
            for size in at
        ]

    def _accurate_runtimes(self, size: _Size) -> frozenset[Variant]:
        """The runtime targets timed at ``size`` within tolerance (deploy may pick them)."""
        rows = [self.rows.get((size.index, j)) for j in range(len(self.variants))]
        return frozenset(
            r.variant
            for r in rows
            if r is not None and r.variant.runtime and r.status == "ok" and r.accurate
        )

    def _gemm_share(self, size: _Size) -> float | None:
        """Eager fp32's share of a call in its matrix products at ``size`` (the limits'
        fp32 seconds over fp32's fastest timed round so far)."""
        return gemm_share([lim.fp32_s for lim in size.limits.values()], size.pairs.rounds)

    def _prepare(
        self,
        variant: Variant,
        batch: Batch,
        size: int,
        index: int,
        module: nn.Module,
        reference: Any,
    ) -> tuple[Prepared, Any]:
        """Warm one built variant, compare its first output with fp32's (``reference``;
        None for fp32 itself) and plan its timed runs (0 when capped or failed). Returns the
        first output too."""
        items = size * self.config.items_per_sample
        result = VariantResult(variant, size, "ok", items_per_call=items)
        result.model_bytes = nbytes(module)
        within = self._compile_within() if variant.compiled else None
        try:
            with self.phase("warm-up"), torch.inference_mode():  # the caller's settings
                warm = self.warm_up.run(module, batch, variant, within)
        except Overrun as stop:  # a compile past the seconds left: abandoned, nothing claimed
            result.status, result.note = "skipped", self.budget.stopped(variant, stop.seconds)
            return Prepared(result, None, 0), None
        except Exception as exc:
            if variant == _FP32:  # the user's own model refuses these inputs
                raise reference_failed(0, batch, exc) from exc
            result.status, result.note = "failed", first_line(exc)
            return Prepared(result, None, 0), None
        if warm.shapes:
            self.shapes, self.ops, self.calls = warm.shapes, warm.ops, warm.calls
            self.convolutions = warm.convolutions
        if variant == _FP32 and index == 0:
            self.call_s, self.yardstick = warm.last, batch
        runs = self._plan(result, warm)
        if self._measures_memory(index):
            result.memory = self.warm_up.peak(warm, result.model_bytes)
        if reference is not None and warm.output is not None:
            with self.phase("compare"):
                judge = self.settled.judge(
                    None if variant.dtype == torch.float32 else variant.dtype
                )
                result.comparison = compare_outputs(
                    [reference], [warm.output], tolerance=judge, dtype=variant.dtype
                )
        return Prepared(result, module if runs else None, runs), warm.output

    def _plan(self, result: VariantResult, warm: Warmed) -> int:
        """The compile time and the number of timed runs (0: capped, timed once). Eager
        fp32 is never capped: every ratio is paired with its rounds, and one round ranks
        nothing; it runs at least 3 rounds, with a note."""
        cfg = self.config
        if result.variant.compiled:
            result.compile_s = warm.first
            self.budget.record(result.variant, warm.first)
            self.phases.move("warm-up", "compile", warm.first, warm.first_cpu)
        if warm.last > cfg.max_call_s and result.variant == _FP32:
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


_STOPPED = "its subprocess was stopped once "  # how a stopped memory row's note begins

_POOLED = (
    "each variant was timed in a pair with eager fp32, their calls alternating round by "
    "round, one variant at a time (so that only one candidate sits beside the model); a "
    "speedup is over fp32's calls in that variant's own pair, and the fp32 row pools "
    "fp32's calls from every pair"
)


def _spread_warning(rows: list[VariantResult]) -> str | None:
    """One line naming every timed row spread over :data:`SPREAD_WARNING`: a busy machine
    spreads every variant alike, so one warning, not one per row."""
    spreads = [
        f"{r.name} @ batch {r.batch_size} {r.timing.spread:.0%}"
        for r in rows
        if r.status == "ok" and r.timing is not None and r.timing.spread > SPREAD_WARNING
    ]
    if not spreads:
        return None
    return (
        f"runs spread over {SPREAD_WARNING:.0%} ((p90-min)/median): {', '.join(spreads)}; "
        "the machine is busy, distrust small ratios"
    )


def _above_limit(r: VariantResult, lim: GemmLimit) -> str:
    return (
        f"{r.name} @ batch {r.batch_size}: {r.speedup:.2f}x fp32 is above its "
        f"{dtype_name(lim.dtype)} eager GEMM ratio {lim.ratio:.2f}x (efficiency "
        f"{r.efficiency:.2f}); that ratio times eager GEMM kernels and is no upper bound "
        "for compiled or fused ones (or the machine was noisy), so no efficiency is claimed"
    )


def _autotunes(v: Variant) -> bool:
    """Whether ``v`` gets a ``+autotune`` twin: a half variant of a way deploy may choose
    that torch compiles (halfprec's conversion, of the built-in ways)."""
    way = v.way
    return way.choosable and way.compilable and v.dtype != torch.float32


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
    row_done: RowDone | None = None,
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
    ``compile=True`` adds a ``torch.compile`` twin of each (of the default variants, only
    of the ways deploy may choose), and on CPU, with the default variants, a ``+autotune``
    twin of each halfprec variant, skipped unless its dtype's
    GEMMs are native here (:func:`~halfprec.bench.variants.autotune_pays`). ``spec``: the MODEL spec
    ``model`` came from; with it, CPU peak memory is measured in a clean subprocess per
    variant (without it, CPU memory is not reported). ``progress(step, total, label)`` is
    called before each variant, ``row_done(row)`` after it. ``probe_timer``: how the
    slow-dtype probe times a call
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
        twins = [v.with_compile(autotune=True) for v in chosen if _autotunes(v)]
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
        row_done=row_done,
        probe_timer=probe_timer,
        timer=timer,
    )
    return engine.run(name).result
