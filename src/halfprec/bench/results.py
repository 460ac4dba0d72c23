"""What :func:`~halfprec.bench.runner.benchmark` is told (:class:`BenchConfig`) and what
it measures: one :class:`VariantResult` per variant and batch size, gathered in a
:class:`BenchResult`, and :func:`fastest_variant`, the fastest accurate one among them
that is faster than fp32 beyond the spread (the one verdict bench and deploy share)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.bench.limit import GemmLimit
from halfprec.bench.machine import MachineInfo
from halfprec.bench.race import Race
from halfprec.bench.variants import Variant
from halfprec.bench.ways import choice_kinds
from halfprec.bench.worker import MemoryUse
from halfprec.compare import Comparison
from halfprec.dtypes import dtype_name
from halfprec.timing import Ratio, Timing, fastest_accurate, ratio_of


@dataclass(frozen=True)
class BenchConfig:
    """How long to measure. ``max_call_s``: a variant whose warm call takes longer is timed
    once and reported as capped; ``max_variant_s``: fewer runs (at least 3) for slow ones.
    ``warmup``: untimed calls of each variant before its timed ones (a compiled variant
    gets at least 2: its first call compiles).
    ``memory``: measure peak memory at ``every`` batch size, the ``first`` only, or ``none``.
    ``skip_slower_than``: skip the variants of a half dtype whose matrix products a quick
    probe finds this many times slower than fp32 on the device (None: time every dtype,
    however slow). ``limit``: measure each half dtype's GEMM limit, spending at most
    ``limit_budget_s`` seconds per dtype and batch size. ``race``: stop timing a variant
    once its rank is settled (:class:`~halfprec.bench.race.Race`; None: every variant
    runs ``runs`` times, or fewer when slow). ``probe_cache``: keep the probe's verdicts
    per machine on disk (:mod:`halfprec.bench.probe_cache`), so that the next run on
    the same machine, torch and thread count does not probe again. ``compiled_memory``:
    also measure a compiled variant's CPU memory (its subprocess compiles the model again,
    about as long as the compile itself; off by default, with a note). ``budget_s``: wall
    seconds the run may start candidates in (:mod:`halfprec.bench.budget`: a compile that
    cannot fit, and any candidate once they are spent, is skipped with a note; None: no
    bound; ``deploy``'s default is :data:`~halfprec.bench.budget.DEPLOY_BUDGET_S`).
    ``budget_origin``: the :func:`time.perf_counter` reading those seconds count from
    (None: the run's start, or deploy's call); ``halfprec deploy`` passes its process's
    start (:func:`~halfprec.bench.budget.process_start`), so that its imports and the
    model's load are charged. ``budget_reserve_s``: seconds of the budget kept for the
    caller's work after the run (``halfprec deploy``'s write and exit): no candidate
    starts that would eat into them."""

    batch_sizes: tuple[int, ...] = ()
    warmup: int = 2
    runs: int = 10
    max_call_s: float = 10.0
    max_variant_s: float = 30.0
    items_per_sample: int = 1
    unit: str = "samples"
    memory: str = "every"
    skip_slower_than: float | None = 3.0
    limit: bool = True
    limit_budget_s: float = 20.0
    race: Race | None = Race()
    probe_cache: bool = True
    compiled_memory: bool = False
    budget_s: float | None = None
    budget_origin: float | None = None
    budget_reserve_s: float = 0.0

    def __post_init__(self) -> None:
        if self.budget_s is not None and not self.budget_s > 0:
            raise ValueError(f"budget_s must be > 0 seconds or None, got {self.budget_s}")
        if not self.budget_reserve_s >= 0:
            raise ValueError(f"budget_reserve_s must be >= 0 seconds, got {self.budget_reserve_s}")
        if self.memory not in ("every", "first", "none"):
            raise ValueError(f"memory must be 'every', 'first' or 'none', got {self.memory!r}")
        if self.skip_slower_than is not None and self.skip_slower_than <= 0:
            raise ValueError(f"skip_slower_than must be > 0, got {self.skip_slower_than}")
        if any(b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch sizes must be >= 1, got {list(self.batch_sizes)}")
        if self.runs < 1 or self.warmup < 1:
            raise ValueError(f"need runs >= 1 and warmup >= 1, got {self.runs}, {self.warmup}")
        if self.max_call_s <= 0 or self.max_variant_s <= 0 or self.limit_budget_s <= 0:
            raise ValueError("max_call_s, max_variant_s and limit_budget_s must be > 0 seconds")
        if self.items_per_sample < 1:
            raise ValueError(f"items_per_sample must be >= 1, got {self.items_per_sample}")


@dataclass
class VariantResult:
    """One variant at one batch size. ``status``: ok, capped (one timed call), skipped (see
    ``note``), or failed. ``efficiency``: speedup / the half dtype's GEMM limit.
    ``compile_s``: the first call of a compiled variant at this batch size (compilation, or
    recompilation for the new shapes, plus one run; each variant is built once and reused
    at every batch size). ``reference_timing``: eager fp32's timed calls in the rounds this
    row was timed in (its pair with fp32, round for round with ``timing``; None for fp32
    itself and for rows timed in no pair): ``speedup`` and its spread come from these."""

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
    efficiency: float | None = None
    compile_s: float | None = None
    reference_timing: Timing | None = None

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
    def checked(self) -> bool:
        """Compared with fp32 (fp32 is the reference; skipped or failed variants are not)."""
        return self.comparison is not None or (
            self.variant.kind == "fp32" and not self.variant.compiled
        )

    @property
    def accurate(self) -> bool:
        """Checked and within the tolerance (fp32 is the reference, so it always is)."""
        if self.comparison is None:
            return self.checked
        return self.comparison.passed

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
            "efficiency": self.efficiency,
            "compile_s": self.compile_s,
            "model_bytes": self.model_bytes,
            "memory": None if self.memory is None else self.memory.to_json(),
            "cosine": None if cmp is None or not cmp.outputs else cmp.worst_cosine,
            "accurate": self.accurate if self.checked else None,  # null: never compared
            "comparison": None if cmp is None else cmp.to_json(),
        }


@dataclass
class BenchResult:
    """Every variant at every batch size, the machine they ran on, and warnings.
    ``seconds``: where the run's time went, by phase (``probe``, ``limit``, ``build``,
    ``warm-up``, ``compile``, ``compare``, ``timing``, ``memory``) and in all (``total``);
    ``cpu_seconds``: the same phases' CPU seconds, this process's threads and the processes
    it started (:func:`~halfprec.bench.phases.cpu_seconds`: less swayed by other load).
    ``budget_s``: the time budget the run had (None: no bound); ``budget_spent_s``: what
    of it was spent when the run started (``halfprec deploy``'s: the process's start, its
    imports and the model's load); ``budget_reserve_s``: what of it was kept for after the
    run (``halfprec deploy``'s write and exit)."""

    model: str
    device: str
    machine: MachineInfo
    unit: str
    results: list[VariantResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    limits: dict[int, dict[torch.dtype, GemmLimit]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    budget_s: float | None = None
    budget_spent_s: float = 0.0
    budget_reserve_s: float = 0.0

    def limit(self, dtype: torch.dtype, batch_size: int | None = None) -> GemmLimit | None:
        """The GEMM limit of ``dtype`` at ``batch_size`` (default: the first), if measured."""
        bs = self.batch_sizes[0] if batch_size is None and self.batch_sizes else batch_size
        return self.limits.get(bs or 0, {}).get(dtype)

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
        first = self.limits.get(self.batch_sizes[0], {}) if self.batch_sizes else {}
        return {
            "model": self.model,
            "device": self.device,
            "unit": self.unit,
            "machine": self.machine.to_json(),
            "warnings": self.warnings,
            "auto_choice": auto,
            "limit": {dtype_name(dt): lim.ratio for dt, lim in first.items()},
            "limits": {
                str(b): {dtype_name(dt): lim.to_json() for dt, lim in by_dtype.items()}
                for b, by_dtype in self.limits.items()
            },
            "results": [r.to_json() for r in self.results],
            "seconds": dict(self.seconds),
            "cpu_seconds": dict(self.cpu_seconds),
            "budget_s": self.budget_s,
            "budget_spent_s": self.budget_spent_s,
            "budget_reserve_s": self.budget_reserve_s,
        }


@dataclass
class BenchRun:
    """What :meth:`~halfprec.bench.runner.Benchmark.run` gives back: the measurements, and
    (with ``keep_modules``) at most one warmed module by variant name: the choice at the
    first batch size (:func:`fastest_variant`, then
    :func:`~halfprec.bench.runtime_choice.with_runtimes`) as it stood when the last
    candidate finished, so that a caller can keep the winner without building or
    compiling it again. Every other candidate was released as soon as it lost. Eager fp32
    is never among them (it is the caller's own model); a caller that wants it, or a
    choice that is not there (the choice rules are not transitive), builds it afresh."""

    result: BenchResult
    modules: dict[str, nn.Module] = field(default_factory=dict)


def relative_rounds(mine: Sequence[float], fp32: Sequence[float]) -> list[float]:
    """Per-round times over eager fp32's time in the same round of their pair (as many as
    both have)."""
    return [a / b if b > 0 else math.inf for a, b in zip(mine, fp32, strict=False)]


def _same_rounds(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[Timing, Timing]:
    rounds = min(len(a), len(b))
    return Timing(a[:rounds]), Timing(b[:rounds])


def paired_speed(reference: VariantResult, row: VariantResult) -> Ratio | None:
    """How many times faster ``row`` ran than ``reference`` (None when either was not
    timed). Against eager fp32: over the rounds of ``row``'s own pair with fp32
    (``row.reference_timing``). Between two rows timed in different pairs: through the
    common reference, round by round, their times relative to fp32's in the same round
    (``reference``'s relative time over ``row``'s). Rows without a pair: over the first
    rounds both were timed in."""
    if reference.timing is None or row.timing is None:
        return None
    if row.reference_timing is not None and reference.variant == Variant("fp32"):
        return ratio_of(*_same_rounds(row.reference_timing.samples, row.timing.samples))
    if row.reference_timing is not None and reference.reference_timing is not None:
        mine = relative_rounds(reference.timing.samples, reference.reference_timing.samples)
        theirs = relative_rounds(row.timing.samples, row.reference_timing.samples)
        return ratio_of(*_same_rounds(tuple(mine), tuple(theirs)))
    return ratio_of(*_same_rounds(reference.timing.samples, row.timing.samples))


def faster_beyond_spread(reference: VariantResult, row: VariantResult) -> bool:
    """Whether ``row`` ran faster than ``reference`` beyond the spread: over at least two
    shared rounds, the interquartile range of the per-round ratios lies above 1."""
    speed = paired_speed(reference, row)
    return speed is not None and speed.ranked and speed.q1 > 1.0


def _fp32(rows: list[VariantResult]) -> VariantResult:
    return next(r for r in rows if r.variant == Variant("fp32"))


def relative_time(fp32: VariantResult, row: VariantResult) -> float | None:
    """``row``'s time relative to eager fp32's (``fp32``; 1.0 for it): one over the median
    of its per-round speed ratios (:func:`paired_speed`), so that rows timed in different
    pairs with fp32 rank through the common reference, not by seconds measured under
    different load. None when not timed."""
    if row is fp32:
        return 1.0
    speed = paired_speed(fp32, row)
    if speed is None:
        return None
    return 1 / speed.median if speed.median > 0 else math.inf


def _usable(r: VariantResult) -> bool:
    return r.status == "ok" and bool(r.accurate)


def fastest_variant(
    result: BenchResult,
    batch_size: int | None = None,
    *,
    kinds: Sequence[str] | None = None,
) -> VariantResult:
    """The fastest measured variant of ``kinds`` (default: the ways deploy may choose,
    :func:`~halfprec.bench.ways.choice_kinds`; by :func:`relative_time`) that meets its
    tolerance and is faster than eager fp32 beyond the spread
    (:func:`faster_beyond_spread`); fp32 when no such variant exists, also when one is
    faster by the median only (:func:`too_noisy` names those). Capped and failed
    variants never win."""
    rows = result.at(result.batch_sizes[0] if batch_size is None else batch_size)
    fp32 = _fp32(rows)
    kinds = choice_kinds() if kinds is None else kinds
    return fastest_accurate(
        fp32,
        (r for r in rows if r.variant.kind in kinds and faster_beyond_spread(fp32, r)),
        latency=lambda r: relative_time(fp32, r),
        accurate=_usable,
    )


def too_noisy(
    result: BenchResult,
    batch_size: int | None = None,
    *,
    kinds: Sequence[str] | None = None,
    than: VariantResult | None = None,
) -> list[tuple[VariantResult, Ratio]]:
    """The accurate variants of ``kinds`` that ran faster than the choice (``than``; default
    :func:`fastest_variant`'s) by the median but were not chosen because their spread
    against fp32 did not say they are faster, with that spread: what "too noisy to rank"
    kept out."""
    size = result.batch_sizes[0] if batch_size is None else batch_size
    rows = result.at(size)
    kinds = choice_kinds() if kinds is None else kinds
    fp32 = _fp32(rows)
    chosen = fastest_variant(result, size, kinds=kinds) if than is None else than
    best = relative_time(fp32, chosen)
    found = []
    for r in rows:
        speed = paired_speed(fp32, r)
        if r is fp32 or r.variant.kind not in kinds or not _usable(r) or speed is None:
            continue
        mine = relative_time(fp32, r)
        faster = best is not None and mine is not None and mine < best
        if faster and not faster_beyond_spread(fp32, r):
            found.append((r, speed))
    return found
