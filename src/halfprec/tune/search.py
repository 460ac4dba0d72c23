"""The fp32-island search for one dtype (steps 2-4 of :mod:`halfprec.tune`): try no
islands, diagnose, try the broken ops, rank the candidate modules, search growing prefixes
of the ranking, then descend into and prune the set that passes, and try the candidates
that cost fewer FLOPs than it alone, together with the hand-offs: the module called just
before each broken one, its sibling under their common parent (what most likely computed
the broken module's input), as an island that hands its output on in fp32
(``Recipe.fp32_outputs``), for a value that fits the dtype but whose rounding breaks the
next module.

Every module is a candidate: the broken ones and those with a local error first, then
every other module, parameterless and never-called ones included (a quantiser with an
integer output has no local error; a codebook whose weight is passed on is never called),
cheapest first. A fix costs its FLOPs in fp32 (:func:`~halfprec.flops.module_flops`), then
its parameters: an op is tried before any module, and a small module before a big one.
Where the op islands that pass keep a GEMM-type op in fp32, that op is tried as a scaled
half GEMM (:mod:`halfprec.convert.scaled`), which costs no fp32 FLOPs, and kept so when
the tolerance still holds.

A hand-off costs no FLOPs of its own: an island handing on in fp32 costs what the island
costs, where the fp32 block enclosing both modules may cost most of the model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from halfprec.batch import call
from halfprec.compare import compare_outputs
from halfprec.convert.core import conversion_report, convert
from halfprec.convert.op_islands import OpRef
from halfprec.convert.recipe import Recipe
from halfprec.convert.scaled import SCALED_OPS
from halfprec.diagnose import Diagnosis, ModuleDiagnosis, diagnose
from halfprec.dtypes import dtype_name, range_of
from halfprec.flops import FlopsUnavailable, fp32_flops_share, module_flops
from halfprec.modules import in_island, param_counts
from halfprec.tolerance import Tolerance
from halfprec.tune.results import Evaluation, TuneConfig, TuneVariant

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Islands:
    """The islands one try adds to the recipe's own, by the recipe's field names: module
    islands, op islands, and islands whose outputs are handed on in fp32. Built sorted
    and without repeats, so that two equal sets are one key."""

    keep_fp32: tuple[str, ...] = ()
    op_islands: tuple[OpRef, ...] = ()
    fp32_outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "keep_fp32", tuple(sorted(self.keep_fp32)))
        object.__setattr__(self, "op_islands", tuple(sorted(set(self.op_islands))))
        object.__setattr__(self, "fp32_outputs", tuple(sorted(self.fp32_outputs)))

    def added_to(self, recipe: Recipe) -> Recipe:
        """``recipe`` with these islands on top of its own."""
        return recipe.replace(
            keep_fp32=recipe.keep_fp32 + self.keep_fp32,
            op_islands=recipe.op_islands + self.op_islands,
            fp32_outputs=recipe.fp32_outputs + self.fp32_outputs,
        )


_NONE = Islands()
_OPS_PER_MODULE = 8
_CHEAPER_SINGLES = 8  # candidates tried alone once a set passes, cheapest first


class _BudgetSpent(Exception):
    pass


def search_islands(
    model: nn.Module,
    batches: list[Any],
    reference: list[Any],
    *,
    dtype: torch.dtype,
    recipe: Recipe,
    tolerance: Tolerance,
    options: TuneConfig,
    progress: Progress,
) -> TuneVariant:
    """The island search for one dtype: the fewest fp32 islands on top of ``recipe``'s
    (converted to ``dtype``) with which ``model`` meets ``tolerance`` on every batch of
    ``batches`` against its fp32 outputs ``reference``. ``progress(text)`` after each try."""
    return _Search(model, batches, reference, dtype, recipe, tolerance, options, progress).run()


class _Search:
    """The island search for one dtype."""

    def __init__(
        self,
        model: nn.Module,
        batches: list[Any],
        reference: list[Any],
        dtype: torch.dtype,
        recipe: Recipe,
        tolerance: Tolerance,
        options: TuneConfig,
        progress: Progress,
    ) -> None:
        self.model, self.batches, self.reference = model, batches, reference
        self.dtype, self.options, self.progress = dtype, options, progress
        self.recipe = recipe.replace(dtype=dtype)
        self.tolerance = tolerance.resolve(dtype)
        self.variant = TuneVariant(dtype)
        self.op_flops: dict[OpRef, int] = {}
        self.flops: dict[str, int] = {}
        self.params = param_counts(model)
        self.cache: dict[Islands, bool] = {}
        self.shares: dict[tuple[str, ...], float] = {}
        # the model without extra islands (for the diagnosis) and the latest passing one
        self.kept: dict[Islands, tuple[nn.Module, list[Any]]] = {}
        self.handoffs: tuple[str, ...] = ()  # producers of the broken modules' inputs

    def convert(self, islands: Islands) -> nn.Module:
        return convert(self.model, islands.added_to(self.recipe))

    def evaluate(
        self, keep: tuple[str, ...], ops: tuple[OpRef, ...] = (), handoffs: tuple[str, ...] = ()
    ) -> bool:
        key = Islands(keep, ops, handoffs)
        if key in self.cache:
            return self.cache[key]
        if len(self.variant.evaluations) >= self.options.max_evaluations:
            raise _BudgetSpent
        half = self.convert(key)
        report = conversion_report(half)
        self.shares[key.keep_fp32] = report.fp32_share if report is not None else 0.0
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
        self.variant.evaluations.append(
            Evaluation(key.keep_fp32, passed, passes, detail, key.op_islands, key.fp32_outputs)
        )
        self.cache[key] = passed
        if passed:
            self.kept = {k: v for k, v in self.kept.items() if k == _NONE}
        if passed or key == _NONE:
            self.kept[key] = (half, outs)
        ops_text = f", {len(key.op_islands)} op islands" if key.op_islands else ""
        ops_text += f", {len(key.fp32_outputs)} fp32 hand-offs" if key.fp32_outputs else ""
        self.progress(
            f"{dtype_name(self.dtype)}: try {len(self.variant.evaluations)}, "
            f"{len(key.keep_fp32)} islands{ops_text}, {'pass' if passed else 'fail'}"
        )
        return passed

    def run(self) -> TuneVariant:
        v = self.variant
        best: Islands | None
        try:
            best = self.search()
        except _BudgetSpent:
            passing = [
                Islands(e.keep_fp32, e.op_islands, e.fp32_outputs)
                for e in v.evaluations
                if e.passed
            ]
            best = (
                min(passing, key=lambda k: (self.share(k.keep_fp32), len(k.op_islands)))
                if passing
                else None
            )
            v.note = f"stopped after max_evaluations={self.options.max_evaluations}"
        if best is not None:
            v.passed = True
            v.keep_fp32, v.op_islands = best.keep_fp32, best.op_islands
            v.fp32_outputs = best.fp32_outputs
            v.fp32_share = self.share(best.keep_fp32)
            if best in self.kept:
                half, outs = self.kept[best]
            else:
                with torch.inference_mode():
                    half = self.convert(best)
                    outs = [call(half, b) for b in self.batches]
                v.passes += len(self.batches)
            v.model = half
            v.comparison = compare_outputs(
                self.reference, outs, tolerance=self.tolerance, dtype=self.dtype
            )
            if not v.flops_unavailable:
                try:
                    v.fp32_flops_share = fp32_flops_share(
                        self.model, half, self.batches[0], self.op_flops, self.flops or None
                    )
                except FlopsUnavailable as exc:
                    v.flops_unavailable = str(exc)
            v.op_flops = dict(self.op_flops)
        elif not v.note:
            v.note = "no set of fp32 islands among the candidates meets the tolerance"
        self.kept.clear()
        return v

    def share(self, keep: tuple[str, ...]) -> float:
        key = tuple(sorted(keep))
        if key not in self.shares:
            report = conversion_report(self.convert(Islands(key)))
            self.shares[key] = report.fp32_share if report is not None else 0.0
        return self.shares[key]

    def search(self) -> Islands | None:
        if self.evaluate(()):
            return _NONE
        kept = self.kept.pop(_NONE, None)
        base = kept[0] if kept is not None else self.convert(_NONE)
        diag = diagnose(self.model, self.batches, self.dtype, half=base, tolerance=self.tolerance)
        self.variant.diagnosis = diag
        self.handoffs = self.producers(diag)
        self.variant.passes += 3 * len(self.batches)  # fp32 + own-code half + full half
        report = conversion_report(base)
        del kept, base
        islands = tuple(report.islands) if report is not None else ()
        ops = self.op_candidates(diag, islands)
        if ops and self.evaluate((), ops):
            return Islands(op_islands=self.scale_gemms(self.prune_ops(ops)))
        try:  # FLOPs order the candidates by cost; without them, parameters do
            self.flops = module_flops(self.model, self.batches[0])
        except FlopsUnavailable as exc:
            self.variant.flops_unavailable = str(exc)
        flagged, ranked = self.rank(diag, islands)
        self.variant.candidates = list(ranked)
        found: tuple[str, ...] | None = flagged
        if not (flagged and self.evaluate(flagged)):
            found = self.prefix_search(ranked, len(flagged))
        if found is None:
            return None
        best = self.descend(self.prune(found), diag)
        return self.cheaper_single(best, ranked)

    def cost(self, names: tuple[str, ...]) -> tuple[int, int]:
        """What keeping ``names`` in fp32 costs: FLOPs, then parameters (an enclosed
        member counts with its enclosing one)."""
        top = [n for n in names if not in_island(n, tuple(o for o in names if o != n))]
        return (
            sum(self.flops.get(n, 0) for n in top),
            sum(self.params.get(n, 0) for n in top),
        )

    def cheaper_single(self, best: tuple[str, ...], ranked: tuple[str, ...]) -> Islands:
        """The cheapest candidate that passes alone, where one costs fewer FLOPs than
        ``best`` (a set that costs none is kept): a ranked module as a plain island, or a
        hand-off (:meth:`producers`) as an island that hands its output on in fp32."""
        limit = self.cost(best)[0]
        cheaper = sorted(
            (n for n in ranked if (n,) != best and self.cost((n,))[0] < limit),
            key=lambda n: self.cost((n,)),
        )
        tries: list[tuple[str, tuple[str, ...]]] = [(n, ()) for n in cheaper[:_CHEAPER_SINGLES]]
        tries += [(n, (n,)) for n in self.handoffs if self.cost((n,))[0] < limit]
        for name, handoff in sorted(tries, key=lambda t: (self.cost((t[0],)), len(t[1]))):
            try:
                if self.evaluate((name,), (), handoff):
                    return Islands((name,), (), handoff)
            except _BudgetSpent:
                break
        return Islands(best)

    def producers(self, diag: Diagnosis) -> tuple[str, ...]:
        """For each broken module, the module called just before it that does not enclose
        it, lifted to its sibling under their common parent (``block.gate`` for a broken
        ``block.loss`` after ``block.gate.proj``), where that sibling's fp32 output fits
        the dtype (beyond it, an island keeps it fp32 anyway)."""
        order = [m.name for m in diag.modules]
        fits = {m.name for m in diag.modules if m.fp32_max_abs <= range_of(self.dtype).max}
        found: list[str] = []
        for m in diag.problems():
            if not m.name:
                continue
            before = [n for n in order[: order.index(m.name)] if not in_island(m.name, (n,))]
            if not before:
                continue
            prev, mine = before[-1].split("."), m.name.split(".")
            pairs = enumerate(zip(prev, mine, strict=False))
            common = next((i for i, (a, b) in pairs if a != b), len(prev))
            sibling = ".".join(prev[: common + 1])
            if sibling in fits and sibling not in found:
                found.append(sibling)
        return tuple(found)

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

    def scale_gemms(self, ops: tuple[OpRef, ...]) -> tuple[OpRef, ...]:
        """Turn fp32 GEMM islands into scaled half ones, most FLOPs first, one at a time,
        while the tolerance still holds."""
        gemms = [r for r in ops if r.op in SCALED_OPS and not r.scaled]
        for ref in sorted(gemms, key=lambda r: -self.op_flops.get(r, 0)):
            trial = tuple(r.with_kind("scaled") if r == ref else r for r in ops)
            try:
                if self.evaluate((), trial):
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
        # then every other module, cheapest first: parameterless and never-called ones too,
        # each but those inside an earlier one
        extra: list[str] = []
        for name in sorted(
            (n for n in self.params if n and not in_island(n, (*ranked, *islands))),
            key=lambda n: self.cost((n,)),
        ):
            if not in_island(name, extra):
                extra.append(name)
        return flagged, ranked + tuple(extra)

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
        range, when they cost less (FLOPs, then parameters), while the tolerance still holds
        (a lifted ``encoder`` becomes the one stage whose values leave the dtype's range)."""
        called = {m.name: m for m in diag.modules}
        broken = {m.name for m in diag.problems()}
        limit = range_of(self.dtype).max

        def hot(name: str) -> bool:
            m = called[name]
            return name in broken or max(m.fp32_max_abs, m.input_max_abs) > limit

        def below(name: str) -> list[str]:
            inside = [n for n in called if n.startswith(name + ".")]
            return [n for n in inside if not any(n.startswith(o + ".") for o in inside)]

        queue = [n for n in best if n in called]
        while queue:
            name = queue.pop(0)
            parts = [n for n in below(name) if hot(n)]
            if not parts or self.cost(tuple(parts)) >= self.cost((name,)):
                continue
            trial = tuple(n for n in best if n != name) + tuple(parts)
            try:
                if self.evaluate(trial):
                    best, queue = trial, queue + parts
            except _BudgetSpent:
                break
        return best

    def prune(self, best: tuple[str, ...]) -> tuple[str, ...]:
        """Drop members one by one, the costliest first, while the tolerance still holds."""
        for name in sorted(best, key=lambda n: self.cost((n,)), reverse=True):
            trial = tuple(n for n in best if n != name)
            try:
                if self.evaluate(trial):
                    best = trial
            except _BudgetSpent:
                break
        return best
