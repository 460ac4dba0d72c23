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
being timed once its rank is settled (:class:`~halfprec.bench.race.Race`). The candidates
are built and timed one at a time, each in a pair with eager fp32 (the caller's model
itself: :mod:`halfprec.bench.runner`), and only the best so far is kept beside the one
being timed: at most two models beside the caller's, whatever the number of candidates.
``Deployed.time_spent`` says where the time went.

By default it also tries every runtime target that is installed and computes a half dtype
of ``config`` on this CPU (OpenVINO with its bf16 hint on a CPU with AVX512-BF16 or AMX);
``runtimes=("openvino", "onnxruntime")`` tries those in fp32 too, ``runtimes=()`` none
(:mod:`halfprec.bench.runtime_choice`): one wins only when it passes the same check and is
faster than the torch choice by its spread.

Every candidate is judged by the recipe's tolerance, or ``tolerance`` where given
(:meth:`~halfprec.Recipe.settle`), and a half variant is chosen only when it is faster than
eager fp32 beyond the spread of the rounds of its pair
(:func:`~halfprec.bench.results.fastest_variant`, bench's own verdict): on a machine too
noisy to rank, deploy returns fp32 and its summary says so. A half choice is then timed
against fp32 once more, at deploy's end, and the speedup claimed spans both moments
(:mod:`halfprec.bench.claim`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from halfprec.batch import as_batches, call, resize_batch
from halfprec.bench.budget import BUDGET_NOTES, DEPLOY_BUDGET_S, Budget, left_out
from halfprec.bench.claim import (
    Claim,
    affordable,
    rules,
    second_call,
    time_again,
    work_bound,
)
from halfprec.bench.interleave import CallTimer
from halfprec.bench.limit import GemmLimit, Timer
from halfprec.bench.phases import Phases, cpu_text
from halfprec.bench.race import Race
from halfprec.bench.race_cache import RaceCache, race_key
from halfprec.bench.results import (
    BenchConfig,
    BenchResult,
    VariantResult,
    faster_beyond_spread,
    fastest_variant,
    paired_speed,
    too_noisy,
)
from halfprec.bench.runner import Benchmark, Progress
from halfprec.bench.runtime_choice import runtime_rows, runtime_variants, with_runtimes
from halfprec.bench.spread import variant_speed
from halfprec.bench.steady import steady_call_time
from halfprec.bench.variants import AUTOTUNE_RECIPES, Variant, build_variant
from halfprec.bench.ways import WAYS, choice_kinds
from halfprec.compare import Tolerance
from halfprec.convert.recipe import Recipe, RecipeLike
from halfprec.modules import model_device
from halfprec.timing import ratio_text, spent_text, spread_text


def _quick() -> BenchConfig:
    """deploy's measurement: one warm-up call (a compiled variant's compiling call and one
    more), the race's ``min_rounds`` (3) timed rounds planned per candidate (the leader
    runs on for its claim: :class:`~halfprec.bench.race.Race`), no memory measurement.

    Past ``min_rounds`` the race's verdicts compare a variant's fastest round with
    another's slowest, which more rounds only move apart: a candidate that is neither
    beaten nor apart by then never is, and its further rounds only refine its median
    beside a close rival's. deploy times its choice again at its end for the claim
    (:mod:`halfprec.bench.claim`), so it does not spend them (BERT-base at batch 8: two
    pairs of 1.6 s). And a time budget (:data:`~halfprec.bench.budget.DEPLOY_BUDGET_S`):
    a compile that cannot fit in what is left, and any candidate once it is spent, is
    skipped with a note (:mod:`halfprec.bench.budget`)."""
    race = Race()
    return BenchConfig(
        warmup=1,
        runs=race.min_rounds,
        memory="none",
        max_variant_s=15.0,
        race=race,
        budget_s=DEPLOY_BUDGET_S,
    )


@dataclass
class Deployed:
    """The chosen module (``model``), the variant it is (``choice``) and every
    measurement (``report``: a :class:`~halfprec.bench.results.BenchResult`, with the
    skipped and out-of-tolerance variants and each half dtype's GEMM limit). ``seconds``:
    where deploy's time went, by phase (``probe``, ``limit``, ``build``, ``warm-up``,
    ``compile``, ``compare``, ``timing``, ``re-timing``: the choice timed again at the end)
    and in all (``total``). ``claim``: the speedup claimed, from the choice's rounds in the
    race and at deploy's end (None where fp32 was chosen: :mod:`halfprec.bench.claim`).
    ``overruled``: why fp32 was kept over the race's choice (its claim from both moments
    did not say it is faster), else empty."""

    model: nn.Module
    choice: VariantResult
    report: BenchResult
    seconds: dict[str, float] = field(default_factory=dict)
    claim: Claim | None = None
    overruled: str = ""

    @property
    def cpu_spent(self) -> str:
        """The benchmark's CPU seconds by phase, e.g. ``CPU 95.1 s: compile 40.2 s, ...``
        (this process's threads and the processes it started:
        :func:`~halfprec.bench.phases.cpu_seconds`)."""
        return cpu_text(self.report.cpu_seconds)

    @property
    def variant(self) -> str:
        """The chosen variant's name, e.g. ``"halfprec-bf16+compile"``."""
        return self.choice.name

    @property
    def runtime(self) -> str:
        """What runs the chosen module: ``"torch"``, ``"openvino"`` or ``"onnxruntime"``."""
        return self.choice.variant.way.runs_in

    @property
    def speedup(self) -> float:
        """Speed over eager fp32 in the same run, as claimed (:attr:`claim`; 1.0 when fp32
        itself was chosen)."""
        if self.claim is not None:
            return self.claim.ratio.median
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
        lim = self.limit
        if lim is None or lim.ratio <= 0 or self.choice.efficiency is None:
            return self.choice.efficiency
        return self.speedup / lim.ratio

    @property
    def summary(self) -> str:
        """One line, e.g. ``halfprec-bf16+compile: 3.90x faster than fp32 (range 3.70-4.00x:
        IQR 3.80-4.00x over 5 rounds in the race, 3.70-3.85x over 3 rounds at deploy's end)
        (0.91 of the limit 4.30x), compiled in 41.2 s, within tolerance`` (``too noisy to
        rank`` where the range does not say it is faster), or ``fp32: 1.00x fp32, ...``;
        skipped variants are named."""
        spread = variant_speed(self.report, self.choice)
        speed = (
            f"{self.speedup:.2f}x fp32" if spread is None else f"{spread_text(spread)} than fp32"
        )
        if self.claim is not None and self.claim.end is not None:
            speed = self.claim.text()
        lim, eff = self.limit, self.efficiency
        if lim is not None and eff is not None and eff <= 1.0:
            speed += f" ({eff:.2f} of the eager GEMM ratio {lim.ratio:.2f}x)"
        elif lim is not None and eff is not None:
            speed += (
                f" (above the eager GEMM ratio {lim.ratio:.2f}x, which bounds eager GEMMs only:"
                " no efficiency claimed)"
            )
        comp = f", compiled in {self.compile_s:.1f} s" if self.compile_s is not None else ""
        rows = [r for r in self.report.results if r.status == "skipped"]
        slow = "slower than fp32 on this device"
        skipped = sorted({r.name for r in rows if slow in r.note}, key=len)
        skip = f"; skipped (probed slow): {', '.join(skipped)}" if skipped else ""
        late = {r.name for r in rows if r.note.startswith(BUDGET_NOTES)}
        absent = [r for r in rows if slow not in r.note and r.name not in late]
        if absent:  # the first one's reason: the command line prints only this summary
            names = ", ".join(sorted({r.name for r in absent}))
            skip += f"; not run here: {names} ({absent[0].name}: {absent[0].note})"
        budget = left_out(rows)
        skip += f"; {budget}" if budget else ""
        kept = f"; {self.overruled}" if self.overruled else ""
        return f"{self.variant}: {speed}{comp}, within tolerance{skip}{self._noisy()}{kept}"

    def _noisy(self) -> str:
        """Why a variant faster by the median than the module deployed (fp32 where the race's
        choice was overruled) was not chosen: its spread against fp32."""
        rows = too_noisy(self.report, self.choice.batch_size, than=self.choice)
        if not rows:
            return ""
        named = ", ".join(
            f"{r.name} {s.median:.2f}x by the median ("
            + (
                "from 1 round: no spread"
                if s.rounds < 2
                else f"IQR {s.q1:.2f}-{s.q3:.2f}x over {s.rounds} rounds"
            )
            + ")"
            for r, s in rows
        )
        return f"; the machine was too noisy to rank {named}: {self.variant} kept"

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
            "claim": None if self.claim is None else self.claim.to_json(),
            "efficiency": self.efficiency,
            "limit": None if lim is None else lim.ratio,
            "compile_s": self.compile_s,
            "accurate": self.choice.accurate,
            "seconds": dict(self.seconds),
            "report": self.report.to_json(),
        }


def _variants(
    half: Sequence[torch.dtype],
    device: torch.device,
    *,
    compile: bool,
    eager: bool,
    runtimes: Sequence[str] | None,
) -> list[Variant]:
    """Each way deploy may choose (fp32, halfprec) in fp32 and each half dtype it runs in,
    eager and/or compiled, then the runtimes."""
    base = [
        Variant(w.name, dt)
        for w in WAYS.values()
        if w.choosable and not w.runtime
        for dt in (torch.float32, *half)
        if dt in w.dtypes
    ]
    compiled = [v.with_compile() for v in base if v.way.compilable]
    variants = (base if eager else []) + (compiled if compile else [])
    if compile and device.type in AUTOTUNE_RECIPES:  # skipped where it cannot pay
        variants += [v.with_compile(autotune=True) for v in compiled if v.dtype in half]
    if not eager:  # speedups are measured against eager fp32, so it is always timed
        variants.insert(0, Variant("fp32"))
    if runtimes is None:  # those that cannot run here are skipped rows that say why
        return variants + runtime_rows(half, device)
    return variants + runtime_variants(runtimes, half)


def deploy(
    model: nn.Module,
    inputs: Any,
    recipe: RecipeLike = "auto",
    *,
    compile: bool = True,
    eager: bool = True,
    tolerance: Tolerance | None = None,
    bench: BenchConfig | None = None,
    progress: Progress | None = None,
    probe_timer: Timer | None = None,
    timer: CallTimer | None = None,
    runtimes: Sequence[str] | None = None,
    budget_s: float | None = DEPLOY_BUDGET_S,
) -> Deployed:
    """The fastest way to run ``model`` on its device that meets the tolerance against
    fp32 on the first batch of ``inputs`` (see the module docs).

    ``recipe``: a :class:`~halfprec.Recipe` or a dtype. Its dtype picks the half
    dtypes tried (``"auto"``: every one the device runs; ``"bf16"``: only bf16), its
    islands shape the halfprec variants, and its tolerance judges every candidate.
    ``compile``: also try each under ``torch.compile`` (the device's deploy recipe);
    ``eager``: also try each uncompiled. ``tolerance``: replaces the recipe's. ``bench``:
    how long to measure (default: one warm-up call, two for a compiled variant, whose
    first call compiles; 3 timed rounds planned per candidate, the leader's claim
    rounds past them; no memory measurement). ``probe_timer``
    and ``timer``: how the slow-dtype probe and the timed calls are timed (default the
    wall clock; tests pass scripted timings). ``Deployed.time_spent`` says where the time
    went. ``runtimes``: None (default) tries the runtimes installed here in the half
    dtypes this CPU computes; a list (``"openvino"``, ``"onnxruntime"``, or ``["all"]``)
    tries those in fp32 and each half dtype they offer, a missing package or a precision
    the CPU lacks skipping that variant with a note; ``()`` tries none. ``budget_s``: the
    wall seconds deploy may start candidates in, counted from this call
    (:mod:`halfprec.bench.budget`; None: no bound); a ``bench`` given carries its own
    (``BenchConfig.budget_s``, and where it counts from: ``budget_origin``, with
    ``budget_reserve_s`` kept for after the call, as ``halfprec deploy`` counts from its
    process's start).

    ``model`` is not changed: it is the fp32 reference, and every candidate is built
    from a copy, one at a time (at most the candidate being timed and the best so far
    beside ``model``). The returned module
    was warmed up on that batch; compiled modules recompile for new shapes, so warm it on
    each serving shape before taking traffic (docs/bench.md). On CUDA a compiled choice
    replays CUDA graphs: clone an output you keep past the next call.
    """
    if not (compile or eager):
        raise ValueError(
            "deploy(compile=False, eager=False) has nothing to try; set compile or eager"
        )
    start = time.perf_counter()
    options = bench or replace(_quick(), budget_s=budget_s)
    budget = Budget.of(options)  # from deploy's start (or the options' origin): all counts
    recipe = Recipe.of(recipe)
    device = model_device(model)
    settled = recipe.settle(device, tolerance)
    batch = as_batches(inputs)[0]
    candidates = _variants(settled.dtypes, device, compile=compile, eager=eager, runtimes=runtimes)
    race = _Race(model, batch, recipe, tolerance, options, progress, probe_timer, timer, budget)
    cache = RaceCache(race_key(model, batch, candidates)) if options.probe_cache else None
    done = None if cache is None else _rerun_winner(race, cache, len(candidates))
    if done is None:
        done = race.run(candidates)
        # fp32 is not kept: on a noisy machine it wins by default, and a quieter run may
        # find a half variant faster
        keep = cache is not None and done.variant != "fp32"
        note = cache.put(done.variant) if cache is not None and keep else None
        done.report.warnings.extend([] if note is None else [note])
    done.seconds["total"] = time.perf_counter() - start
    return done


def _rerun_winner(race: _Race, cache: RaceCache, candidates: int) -> Deployed | None:
    """The winner of an earlier race on this machine (:mod:`halfprec.bench.race_cache`),
    built, checked and timed against eager fp32 again; None when there is none, or when it
    no longer wins (the caller then races every candidate)."""
    hit = cache.get()
    if hit is None:
        return None
    winner = Variant.parse(hit[0])
    # it won within its budget before, and its compile is likely in inductor's cache now,
    # which the budget's estimate cannot see
    race = replace(race, options=replace(race.options, budget_s=None), budget=None)
    done = race.run(list(dict.fromkeys([Variant("fp32"), winner])))
    if done.variant != winner.name:
        return None
    done.report.warnings.append(
        f"deploy raced these {candidates} candidates on this machine before ({hit[1]}): "
        f"only {winner.name} was built, checked and timed again ({cache.path}; "
        "HALFPREC_RACE_CACHE=0 races them all)"
    )
    return done


def _work_bound(result: BenchResult, best: VariantResult) -> float | None:
    """The most ``best`` can be faster than eager fp32 for the work at its batch size
    (:func:`~halfprec.bench.claim.work_bound`): fp32's fastest round, the seconds its
    matrix products take (the least the GEMM limits timed), at the eager GEMM ratio of the
    choice's dtype. None where the limits timed none (the half dtypes probed slow)."""
    limits = result.limits.get(best.batch_size, {})
    gemm = [lim.fp32_s for lim in limits.values() if lim.fp32_s]
    fp32 = result.get("fp32", best.batch_size).timing
    lim = limits.get(best.variant.dtype)
    kernels = lim.ratio if lim is not None else 1.0
    fastest = min(fp32.samples) if fp32 is not None and fp32.samples else None
    return work_bound(min(gemm) if gemm else None, fastest, kernels)


def _raced(result: BenchResult, best: VariantResult) -> str:
    """The other candidates the race found faster than fp32 beyond the spread, which are
    not timed again when ``best`` is overruled, e.g. ``; not timed again: halfprec-fp16
    1.25x faster in the race`` (empty where there are none)."""
    rows = result.at(best.batch_size)
    fp32 = result.get("fp32", best.batch_size)
    named = [
        f"{r.name} {ratio_text(speed.median)} in the race"
        for r in rows
        if r.name not in (best.name, fp32.name)
        and (r.variant.kind in choice_kinds() or r.variant.runtime)
        and r.status == "ok"
        and r.accurate
        and faster_beyond_spread(fp32, r)
        and (speed := paired_speed(fp32, r)) is not None
    ]
    return f"; not timed again: {', '.join(named)}" if named else ""


@dataclass(frozen=True)
class _Race:
    """One deploy race over some candidates: the engine run and the choice."""

    model: nn.Module
    batch: Any
    recipe: Recipe
    tolerance: Tolerance | None
    options: BenchConfig
    progress: Progress | None = None
    probe_timer: Timer | None = None
    timer: CallTimer | None = None
    budget: Budget | None = None  # None: the options' budget_s, from the race's start

    def run(self, variants: list[Variant]) -> Deployed:
        """Benchmark ``variants`` and keep the fastest accurate one (see :func:`deploy`)."""
        raced, _ = rules(self.options.race)
        engine = Benchmark(
            self.model,
            self.batch,
            variants=variants,
            recipe=self.recipe,
            tolerance=self.tolerance,
            options=replace(self.options, race=raced),
            progress=self.progress,
            probe_timer=self.probe_timer,
            timer=self.timer,
            keep_modules=True,
            budget=self.budget,
        )
        run = engine.run()
        result = run.result
        best = with_runtimes(result, fastest_variant(result))
        seconds = dict(result.seconds)
        chosen = run.modules.get(best.name)
        if chosen is None:  # eager fp32 (the caller's model: never handed out), or a choice
            chosen = self._rebuild(best.variant, seconds)  # dropped as it lost for a while
        claim = self._claim(result, best, chosen, seconds)
        if claim is None or claim.faster:
            return Deployed(chosen, best, result, seconds, claim)
        note = f"{best.name} timed again at deploy's end: {claim.text()}{_raced(result, best)}"
        note += ": fp32 kept"
        result.warnings.append(note)
        fp32 = result.get("fp32", best.batch_size)
        del chosen
        model = self._rebuild(fp32.variant, seconds)
        return Deployed(model, fp32, result, seconds, overruled=note)

    def _claim(
        self, result: BenchResult, best: VariantResult, chosen: nn.Module, seconds: dict[str, float]
    ) -> Claim | None:
        """The claim for a half choice: its rounds in the race, and its rounds timed again
        with fp32 now, at deploy's end (:mod:`halfprec.bench.claim`); their wall and CPU
        seconds are ``re-timing``. None for fp32."""
        race = variant_speed(result, best)
        if race is None or best.variant == Variant("fp32"):
            return None
        device = model_device(self.model)
        end = affordable(rules(self.options.race)[1], best)
        second = second_call(end, best)
        timer = self.timer or (lambda fn, _v: steady_call_time(fn, device, second=second))
        runs = self.options.runs if end is None else end.min_rounds
        batch = resize_batch(self.batch, best.batch_size)
        phases = Phases()
        with phases.phase("re-timing"):
            again = time_again(self.model, chosen, best, batch, end, runs, timer)
        seconds.update(phases.wall)
        cpu = result.cpu_seconds
        cpu.update(phases.cpu, total=cpu.get("total", 0.0) + phases.cpu["re-timing"])
        most = _work_bound(result, best)
        return Claim(race, most=most) if again is None else Claim(race, *again, second, most)

    def _rebuild(self, variant: Variant, seconds: dict[str, float]) -> nn.Module:
        """``variant`` built afresh from a copy of the model, a compiled one warmed (so
        compiled) on the batch; its seconds join ``build`` (``compile`` for the call)."""
        start = time.perf_counter()
        module = build_variant(self.model, variant, self.recipe, batch=self.batch)
        seconds["build"] = seconds.get("build", 0.0) + time.perf_counter() - start
        if variant.compiled:
            start = time.perf_counter()
            with torch.inference_mode():  # as bench warmed it: the caller's settings
                call(module, self.batch)
            seconds["compile"] = seconds.get("compile", 0.0) + time.perf_counter() - start
        return module
