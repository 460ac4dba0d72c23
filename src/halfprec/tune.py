"""Search for a small set of fp32 islands that makes a half model meet a tolerance.

``tune(model, inputs, config, tolerance=...)``:

1. runs the fp32 reference on every calibration batch, and once more on the first batch:
   when fp32 does not reproduce itself (dropout left in train mode, random ops) no policy
   can meet the tolerance, and tune says so (:class:`ToleranceUnreachableError`);
2. converts with no extra islands; done if every batch meets the tolerance;
3. otherwise diagnoses that conversion (:func:`halfprec.diagnose`) and ranks candidates:
   modules whose own half computation breaks (raises, inf/NaN, error above the threshold)
   first, then the rest by local error. A candidate whose fp32 inputs or outputs do not fit
   the dtype is lifted to its enclosing module, since an island hands back the caller's
   dtype;
4. tries the broken modules together, then growing prefixes of the ranking (doubling, then
   bisection), and finally drops members one by one, largest first, while the tolerance
   still holds. Sets may be non-contiguous; each try converts afresh and runs the batches,
   stopping at the first batch that fails;
5. with dtype ``"auto"`` does this for every candidate dtype (fp16 and bf16 where the
   device runs them) and keeps the fastest variant that
   meets the tolerance, timed on this device.

Every forward pass of the full model is counted in ``report.passes``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec._version import __version__
from halfprec.batch import as_batches, call
from halfprec.compare import Comparison, Tolerance, compare_outputs, run_reference
from halfprec.convert.core import ConfigLike, ConvertConfig, conversion_report, convert
from halfprec.convert.op_islands import OpRef
from halfprec.convert.policy import Policy
from halfprec.diagnose import Diagnosis, ModuleDiagnosis, diagnose
from halfprec.dtypes import dtype_name, is_auto, range_of
from halfprec.errors import DTypeError, HalfprecError
from halfprec.flops import fp32_flops_share
from halfprec.modules import in_island, model_device
from halfprec.timing import measure

__all__ = [
    "TuneConfig",
    "Evaluation",
    "TuneVariant",
    "TuneReport",
    "TuneResult",
    "ToleranceUnreachableError",
    "tune",
]

Progress = Callable[[str], None]
Islands = tuple[tuple[str, ...], tuple[OpRef, ...]]  # module islands, op islands
_OPS_PER_MODULE = 8


class ToleranceUnreachableError(HalfprecError):
    """Even fp32 against itself misses the tolerance: no set of islands can meet it."""


@dataclass(frozen=True)
class TuneConfig:
    """How hard :func:`tune` searches, checked on construction. (What to convert to, and
    the islands every try keeps, come from the :class:`ConvertConfig`.)"""

    tolerance: Tolerance | None = None
    max_evaluations: int = 40
    timing_runs: int = 5

    def __post_init__(self) -> None:
        if self.max_evaluations < 1:
            raise ValueError(f"max_evaluations must be >= 1, got {self.max_evaluations}")
        if self.timing_runs < 1:
            raise ValueError(f"timing_runs must be >= 1, got {self.timing_runs}")

    def tolerance_for(self, dtype: torch.dtype) -> Tolerance:
        return self.tolerance if self.tolerance is not None else Tolerance.for_dtype(dtype)


@dataclass(frozen=True)
class Evaluation:
    """One tried set of islands."""

    keep_fp32: tuple[str, ...]
    passed: bool
    passes: int
    detail: str
    op_islands: tuple[OpRef, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "keep_fp32": list(self.keep_fp32),
            "op_islands": [str(o) for o in self.op_islands],
        }


@dataclass
class TuneVariant:
    """The search for one dtype."""

    dtype: torch.dtype
    passed: bool = False
    keep_fp32: tuple[str, ...] = ()
    fp32_share: float = 0.0
    op_islands: tuple[OpRef, ...] = ()
    fp32_flops_share: float | None = None
    passes: int = 0
    evaluations: list[Evaluation] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    diagnosis: Diagnosis | None = None
    comparison: Comparison | None = None
    latency: float | None = None
    note: str = ""
    model: nn.Module | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        div = self.diagnosis.divergence if self.diagnosis is not None else None
        return {
            "dtype": dtype_name(self.dtype),
            "passed": self.passed,
            "keep_fp32": list(self.keep_fp32),
            "fp32_share": self.fp32_share,
            "op_islands": [o.to_json() for o in self.op_islands],
            "fp32_flops_share": self.fp32_flops_share,
            "passes": self.passes,
            "latency_s": self.latency,
            "note": self.note,
            "candidates": self.candidates,
            "divergence": div.to_json() if div is not None else None,
            "evaluations": [e.to_json() for e in self.evaluations],
            "comparison": self.comparison.to_json() if self.comparison is not None else None,
        }


@dataclass
class TuneReport:
    """What :func:`tune` found and what it cost."""

    dtype: torch.dtype
    passed: bool
    keep_fp32: tuple[str, ...]
    fp32_share: float
    passes: int
    seconds: float
    reason: str
    batches: int
    variants: list[TuneVariant]
    fp32_latency: float | None = None
    op_islands: tuple[OpRef, ...] = ()
    fp32_flops_share: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": dtype_name(self.dtype),
            "passed": self.passed,
            "keep_fp32": list(self.keep_fp32),
            "fp32_share": self.fp32_share,
            "op_islands": [o.to_json() for o in self.op_islands],
            "fp32_flops_share": self.fp32_flops_share,
            "passes": self.passes,
            "seconds": self.seconds,
            "reason": self.reason,
            "batches": self.batches,
            "fp32_latency_s": self.fp32_latency,
            "variants": [v.to_json() for v in self.variants],
        }


@dataclass
class TuneResult:
    """``model``: the converted model (None when no set met the tolerance)."""

    model: nn.Module | None
    report: TuneReport
    config: ConvertConfig = field(default_factory=ConvertConfig)

    @property
    def keep_fp32(self) -> tuple[str, ...]:
        return self.report.keep_fp32

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def policy(self) -> Policy:
        if not self.passed:
            raise HalfprecError(
                "tune found no set of fp32 islands that meets the tolerance, so there is no "
                "policy to write; loosen the tolerance or raise max_evaluations"
            )
        variant = next(v for v in self.report.variants if v.dtype == self.report.dtype)
        tol = variant.comparison.tolerance.__dict__ if variant.comparison is not None else {}
        given = [s for s in self.config.selectors if isinstance(s, str)]
        return Policy(
            dtype=self.report.dtype,
            keep_fp32=tuple(dict.fromkeys([*given, *self.keep_fp32])),
            op_islands=self.report.op_islands,
            info={
                "tool": f"halfprec {__version__} tune",
                "tolerance": tol,
                "fp32_share": self.report.fp32_share,
                "passes": self.report.passes,
                "batches": self.report.batches,
                "norm_islands": self.config.norm_islands,
                "reason": self.report.reason,
            },
        )

    def save_policy(self, path: str) -> None:
        self.policy.save(path)


class _BudgetSpent(Exception):
    pass


class _Search:
    """The island search for one dtype."""

    def __init__(
        self,
        model: nn.Module,
        batches: list[Any],
        reference: list[Any],
        dtype: torch.dtype,
        convert_config: ConvertConfig,
        config: TuneConfig,
        progress: Progress,
    ) -> None:
        self.model, self.batches, self.reference = model, batches, reference
        self.dtype, self.config, self.progress = dtype, config, progress
        self.convert_config = convert_config.replace(dtype=dtype)
        self.tolerance = config.tolerance_for(dtype)
        self.variant = TuneVariant(dtype)
        self.op_flops: dict[OpRef, int] = {}
        self.cache: dict[Islands, bool] = {}
        self.shares: dict[tuple[str, ...], float] = {}
        # the model without extra islands (for the diagnosis) and the latest passing one
        self.kept: dict[Islands, tuple[nn.Module, list[Any]]] = {}

    def convert(self, keep: tuple[str, ...], ops: tuple[OpRef, ...] = ()) -> nn.Module:
        cfg = self.convert_config
        changes: dict[str, Any] = {"keep_fp32": cfg.keep_fp32 + keep}
        if ops:  # op islands travel in a policy, on top of the caller's own one
            given = cfg.loaded_policy
            changes["policy"] = Policy(
                dtype=self.dtype,
                keep_fp32=given.keep_fp32 if given is not None else (),
                op_islands=(given.op_islands if given is not None else ()) + ops,
            )
        return convert(self.model, cfg.replace(**changes))

    def evaluate(self, keep: tuple[str, ...], ops: tuple[OpRef, ...] = ()) -> bool:
        key: Islands = (tuple(sorted(keep)), tuple(sorted(set(ops))))
        if key in self.cache:
            return self.cache[key]
        if len(self.variant.evaluations) >= self.config.max_evaluations:
            raise _BudgetSpent
        half = self.convert(*key)
        report = conversion_report(half)
        self.shares[key[0]] = report.fp32_share if report is not None else 0.0
        passed, detail, passes, outs = True, "ok", 0, []
        with torch.inference_mode():
            for i, batch in enumerate(self.batches):
                passes += 1
                try:
                    out = call(half, batch)
                except Exception as exc:  # a half run that raises fails this set
                    passed, detail = False, f"batch {i}: raised {type(exc).__name__}"
                    break
                outs.append(out)
                cmp = compare_outputs(
                    [self.reference[i]], [out], tolerance=self.tolerance, dtype=self.dtype
                )
                if not cmp.passed:
                    fails = [f"{o.path}: {f}" for o in cmp.outputs for f in o.failures]
                    passed, detail = False, f"batch {i}: " + "; ".join((cmp.problems + fails)[:2])
                    break
        self.variant.passes += passes
        self.variant.evaluations.append(Evaluation(key[0], passed, passes, detail, key[1]))
        self.cache[key] = passed
        if passed:
            self.kept = {k: v for k, v in self.kept.items() if k == ((), ())}
        if passed or key == ((), ()):
            self.kept[key] = (half, outs)
        ops_text = f", {len(key[1])} op islands" if key[1] else ""
        self.progress(
            f"{dtype_name(self.dtype)}: try {len(self.variant.evaluations)}, "
            f"{len(key[0])} islands{ops_text}, {'pass' if passed else 'fail'}"
        )
        return passed

    def run(self) -> TuneVariant:
        v = self.variant
        best: Islands | None
        try:
            best = self.search()
        except _BudgetSpent:
            passing = [(e.keep_fp32, e.op_islands) for e in v.evaluations if e.passed]
            best = min(passing, key=lambda k: (self.share(k[0]), len(k[1]))) if passing else None
            v.note = f"stopped after max_evaluations={self.config.max_evaluations}"
        if best is not None:
            best = (tuple(sorted(best[0])), tuple(sorted(set(best[1]))))
            v.passed, (v.keep_fp32, v.op_islands) = True, best
            v.fp32_share = self.share(best[0])
            if best in self.kept:
                half, outs = self.kept[best]
            else:
                with torch.inference_mode():
                    half = self.convert(*best)
                    outs = [call(half, b) for b in self.batches]
                v.passes += len(self.batches)
            v.model = half
            v.comparison = compare_outputs(
                self.reference, outs, tolerance=self.tolerance, dtype=self.dtype
            )
            v.fp32_flops_share = fp32_flops_share(self.model, half, self.batches[0], self.op_flops)
        elif not v.note:
            v.note = "no set of fp32 islands among the candidates meets the tolerance"
        self.kept.clear()
        return v

    def share(self, keep: tuple[str, ...]) -> float:
        key = tuple(sorted(keep))
        if key not in self.shares:
            report = conversion_report(self.convert(key))
            self.shares[key] = report.fp32_share if report is not None else 0.0
        return self.shares[key]

    def search(self) -> Islands | None:
        if self.evaluate(()):
            return ((), ())
        kept = self.kept.pop(((), ()), None)
        base = kept[0] if kept is not None else self.convert(())
        diag = diagnose(self.model, self.batches, self.dtype, half=base, tolerance=self.tolerance)
        self.variant.diagnosis = diag
        self.variant.passes += 3 * len(self.batches)  # fp32 + own-code half + full half
        report = conversion_report(base)
        del kept, base
        islands = tuple(report.islands) if report is not None else ()
        ops = self.op_candidates(diag, islands)
        if ops and self.evaluate((), ops):
            return ((), self.prune_ops(ops))
        flagged, ranked = self.rank(diag, islands)
        self.variant.candidates = list(ranked)
        found: tuple[str, ...] | None = flagged
        if not (flagged and self.evaluate(flagged)):
            found = self.prefix_search(ranked, len(flagged))
        return (self.descend(self.prune(found, diag), diag), ()) if found is not None else None

    def op_candidates(self, diag: Diagnosis, islands: tuple[str, ...]) -> tuple[OpRef, ...]:
        """The broken ops of the broken modules' own code (the root included), worst first."""
        self.op_flops = {o.ref: o.flops for o in diag.ops}
        out: list[OpRef] = []
        for m in diag.problems():
            if any(m.name == i or m.name.startswith(i + ".") for i in islands if i):
                continue
            out += [o.ref for o in diag.problem_ops(m.name)[:_OPS_PER_MODULE]]
        return tuple(out)

    def prune_ops(self, ops: tuple[OpRef, ...]) -> tuple[OpRef, ...]:
        """Drop op islands one by one, most FLOPs first, while the tolerance still holds."""
        for ref in sorted(ops, key=lambda r: -self.op_flops.get(r, 0)):
            trial = tuple(r for r in ops if r != ref)
            try:
                if trial and self.evaluate((), trial):
                    ops = trial
            except _BudgetSpent:
                break
        return ops

    def rank(
        self, diag: Diagnosis, islands: tuple[str, ...]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        called = {m.name: m for m in diag.modules}
        limit = range_of(self.dtype).max

        def first_up(name: str, fits: Callable[[ModuleDiagnosis], bool]) -> str | None:
            while name:
                m = called.get(name)
                if m is not None and fits(m):
                    return name
                name = name.rpartition(".")[0]
            return None

        def lift(name: str) -> str | None:
            # the nearest module whose fp32 inputs and outputs fit the dtype; failing that
            # (values out of range up to the model's output), the nearest whose inputs fit,
            # else the module itself: an island that is no norm keeps an out-of-range output
            # fp32, so a chain of such islands carries it to the model's output
            return (
                first_up(name, lambda m: max(m.fp32_max_abs, m.input_max_abs) <= limit)
                or first_up(name, lambda m: m.input_max_abs <= limit)
                or (name if name in called else None)
            )

        def normalize(names: list[str]) -> tuple[str, ...]:
            out: list[str] = []
            for name in names:
                lifted = lift(name)
                if lifted is None or in_island(lifted, islands) or in_island(lifted, out):
                    continue
                out = [o for o in out if not o.startswith(lifted + ".")] + [lifted]
            return tuple(out)

        broken = [m.name for m in diag.problems() if m.name]
        rest = sorted(
            (m for m in diag.modules if m.name and m.name not in broken and m.local_error > 0),
            key=lambda m: -m.local_error,
        )
        flagged = normalize(broken)
        ranked = normalize(list(flagged) + [m.name for m in rest[:64]])
        return flagged, ranked

    def prefix_search(self, ranked: tuple[str, ...], known_fail: int) -> tuple[str, ...] | None:
        n = len(ranked)
        lo, step, hi = known_fail, 1, None
        k = min(n, lo + 1)
        while n and k <= n:
            if self.evaluate(ranked[:k]):
                hi = k
                break
            lo = k
            if k == n:
                break
            step *= 2
            k = min(n, lo + step)
        if hi is None:
            return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.evaluate(ranked[:mid]):
                hi = mid
            else:
                lo = mid
        return ranked[:hi]

    def descend(self, best: tuple[str, ...], diag: Diagnosis) -> tuple[str, ...]:
        """Replace a member by its nearest called descendants that break or run out of
        range, when they hold fewer parameters, while the tolerance still holds (a lifted
        ``encoder`` becomes the one stage whose values leave the dtype's range)."""
        called = {m.name: m for m in diag.modules}
        broken = {m.name for m in diag.problems()}
        limit = range_of(self.dtype).max

        def hot(name: str) -> bool:
            m = called[name]
            return name in broken or max(m.fp32_max_abs, m.input_max_abs) > limit

        def below(name: str) -> list[str]:
            inside = [n for n in called if n.startswith(name + ".")]
            return [n for n in inside if not any(n.startswith(o + ".") for o in inside)]

        queue = list(best)
        while queue:
            name = queue.pop(0)
            parts = [n for n in below(name) if hot(n)]
            if not parts or sum(called[n].params for n in parts) >= called[name].params:
                continue
            trial = tuple(n for n in best if n != name) + tuple(parts)
            try:
                if self.evaluate(trial):
                    best, queue = trial, queue + parts
            except _BudgetSpent:
                break
        return best

    def prune(self, best: tuple[str, ...], diag: Diagnosis) -> tuple[str, ...]:
        params = {m.name: m.params for m in diag.modules}
        for name in sorted(best, key=lambda n: -params.get(n, 0)):
            trial = tuple(n for n in best if n != name)
            try:
                if self.evaluate(trial):
                    best = trial
            except _BudgetSpent:
                break
        return best


def _reference_check(
    model: nn.Module, batches: list[Any], reference: list[Any], tolerance: Tolerance
) -> None:
    with torch.inference_mode():
        again = run_reference(model, batches[:1])
    cmp = compare_outputs(reference[:1], again, tolerance=tolerance, dtype=None)
    if cmp.passed:
        return
    why = next((f for o in cmp.outputs for f in o.failures), None) or "; ".join(cmp.problems)
    hint = (
        "the model is in train mode (dropout is active): call model.eval()"
        if model.training
        else "the reference is not deterministic (random ops in forward?)"
    )
    raise ToleranceUnreachableError(
        f"even fp32 misses the tolerance against a second fp32 run ({why}), so no fp32 "
        f"islands can meet it: {hint}, or loosen the tolerance"
    )


def tune(
    model: nn.Module,
    inputs: Any,
    config: ConfigLike = None,
    *,
    tolerance: Tolerance | None = None,
    max_evaluations: int = 40,
    progress: Progress | None = None,
) -> TuneResult:
    """Find fp32 islands so that ``convert(model, config)`` plus those islands meets
    ``tolerance`` on every calibration batch in ``inputs`` (see the module docs).

    ``config``: a :class:`ConvertConfig` or a dtype. Its islands (``keep_fp32``, policy,
    norm islands) are kept in every try. Its dtype ``"auto"`` (the default) means: search
    every candidate dtype (:func:`~halfprec.dtypes.candidate_dtypes`) and keep the fastest
    passing variant. ``progress(text)`` is called after each try.
    """
    start = time.perf_counter()
    cfg = ConvertConfig.of(config)
    options = TuneConfig(tolerance=tolerance, max_evaluations=max_evaluations)
    report_progress = progress or (lambda text: None)
    cal = as_batches(inputs)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    dtypes = cfg.candidates(device)
    if not dtypes:
        raise DTypeError(f"{device} runs neither fp16 nor bf16; tune on another device")
    reference = run_reference(model, cal)
    strictest = options.tolerance_for(dtypes[0])
    _reference_check(model, cal, reference, strictest)
    passes = len(cal) + 1
    variants = []
    for dt in dtypes:
        search = _Search(model, cal, reference, dt, cfg, options, report_progress)
        try:
            variant = search.run()
        except DTypeError as exc:
            if len(dtypes) == 1:
                raise
            variant = TuneVariant(dt, note=f"cannot run here: {exc}")
        passes += variant.passes
        variants.append(variant)
    chosen, reason, fp32_latency = _choose(
        model, cal, variants, options, report_progress, auto=is_auto(cfg.requested)
    )
    converted = chosen.model if chosen.passed else None
    for v in variants:
        v.model = None  # only the chosen variant's model is handed back
    report = TuneReport(
        dtype=chosen.dtype,
        passed=chosen.passed,
        keep_fp32=chosen.keep_fp32,
        fp32_share=chosen.fp32_share,
        passes=passes,
        seconds=time.perf_counter() - start,
        reason=reason,
        batches=len(cal),
        variants=variants,
        fp32_latency=fp32_latency,
        op_islands=chosen.op_islands,
        fp32_flops_share=chosen.fp32_flops_share,
    )
    return TuneResult(converted, report, cfg)


def _latency(model: nn.Module, batch: Any, device: torch.device, runs: int) -> float:
    return measure(lambda: call(model, batch), device=device, runs=runs).median


def _choose(
    model: nn.Module,
    batches: list[Any],
    variants: list[TuneVariant],
    config: TuneConfig,
    progress: Progress,
    *,
    auto: bool,
) -> tuple[TuneVariant, str, float | None]:
    passing = [v for v in variants if v.passed]
    if len(variants) == 1:
        v = variants[0]
        why = "auto: the only half dtype this device runs" if auto else "requested"
        return v, f"{why} {dtype_name(v.dtype)}", None
    if not passing:
        return variants[0], "no dtype meets the tolerance", None
    if len(passing) == 1:
        v = passing[0]
        return v, f"auto: only {dtype_name(v.dtype)} meets the tolerance", None
    progress("timing the variants that meet the tolerance")
    first = batches[0]
    device = model_device(model)
    runs = config.timing_runs
    with torch.inference_mode():
        for v in passing:
            assert v.model is not None  # set by _Search.run for every passing variant
            v.latency = _latency(v.model, first, device, runs)
        fp32 = _latency(model, first, device, runs)
    best = min(passing, key=lambda v: v.latency or float("inf"))
    times = ", ".join(f"{dtype_name(v.dtype)} {1e3 * (v.latency or 0):.1f} ms" for v in passing)
    why = (
        f"auto: fastest variant meeting the tolerance (median of {runs} runs on batch 0: "
        f"{times}; fp32 {1e3 * fp32:.1f} ms)"
    )
    if best.latency is not None and fp32 < best.latency:
        why += "; fp32 is faster on this device, so half precision only saves memory here"
    return best, why, fp32
