"""``tune``: check that fp32 reproduces itself, search each candidate dtype, and choose
between the dtypes that meet the tolerance (step 5 of :mod:`halfprec.tune`)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import torch
from torch import nn

from halfprec.batch import as_batches, call
from halfprec.compare import Comparison, compare_outputs, run_reference
from halfprec.convert.core import convert, recipe_of
from halfprec.convert.op_islands import recording_ordinals, with_ordinals
from halfprec.convert.recipe import Recipe, RecipeLike, Settled
from halfprec.diagnose.inputs import input_rounding, input_rounding_note
from halfprec.dtypes import dtype_name, is_auto
from halfprec.errors import DTypeError
from halfprec.flops import FlopsUnavailable, fp32_flops_share
from halfprec.modules import model_device
from halfprec.timing import fastest_accurate, measure_interleaved, ratio_of, spread_text
from halfprec.tolerance import Tolerance
from halfprec.tree import flatten
from halfprec.tune.results import (
    ToleranceUnreachableError,
    TuneConfig,
    TuneReport,
    TuneResult,
    TuneVariant,
    tuned_info,
)
from halfprec.tune.search import Progress, search_islands


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
    recipe: RecipeLike = None,
    *,
    tolerance: Tolerance | None = None,
    max_evaluations: int = 40,
    progress: Progress | None = None,
    validate: Any = None,
) -> TuneResult:
    """Find fp32 islands so that ``convert(model, recipe)`` plus those islands meets
    ``tolerance`` on every calibration batch in ``inputs`` (see :mod:`halfprec.tune`).

    ``recipe``: a :class:`~halfprec.Recipe`, a dtype or a recipe file. Its islands
    (``keep_fp32``, op islands, norm islands) are kept in every try; ``tolerance``
    (default: the recipe's) judges every try. Its dtype ``"auto"`` (the default) means:
    search every candidate dtype (:func:`~halfprec.dtypes.candidate_dtypes`) and keep the
    fastest passing variant. ``progress(text)`` is called after each try.

    The search sees only some of the batches: with ``validate`` (batches), all of
    ``inputs``, else all of them but the last, when there are two or more. The recipe found
    is then *confirmed* on the batches the search did not see; one that meets the tolerance
    on its calibration batches but fails there is not a pass (``report.calibrated`` and
    ``report.confirmation`` keep both verdicts).
    """
    start = time.perf_counter()
    given = Recipe.of(recipe)
    options = TuneConfig(max_evaluations=max_evaluations)
    report_progress = progress or (lambda text: None)
    cal, held = _split(as_batches(inputs), validate)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    settled = given.settle(device, tolerance)
    if not settled.dtypes:
        raise DTypeError(f"{device} runs neither fp16 nor bf16; tune on another device")
    reference = run_reference(model, cal)
    _reference_check(model, cal, reference, settled.judge(settled.dtypes[0]))
    variants = _search_each(model, cal, reference, given, settled, options, report_progress)
    chosen, reason, fp32_latency = _choose(
        model, cal, variants, options, report_progress, auto=is_auto(given.requested)
    )
    converted = chosen.model if chosen.passed else None
    for v in variants:
        v.model = None  # only the chosen variant's model is handed back
    report = _report(chosen, variants, reason, fp32_latency, len(cal), start)
    tol = settled.judge(chosen.dtype)
    report.notes += _notes(model, cal, reference, chosen, tol)
    if converted is None:
        return TuneResult(None, report, given)
    found = _final_recipe(converted, cal, settled.tolerance, report)
    found, final = _stable_ops(model, found, converted, cal)
    if held:
        found, final = _confirmed(model, found, final, cal, held, tol, chosen, report)
        if not report.passed:
            return TuneResult(None, report, given)
    return TuneResult(final, report, given, found)


def _split(given: list[Any], validate: Any) -> tuple[list[Any], list[Any]]:
    """The calibration batches and the batches the recipe is confirmed on."""
    if validate is not None:
        return given, as_batches(validate)
    return (given[:-1], given[-1:]) if len(given) >= 2 else (given, [])


def _search_each(
    model: nn.Module,
    cal: list[Any],
    reference: list[Any],
    recipe: Recipe,
    settled: Settled,
    options: TuneConfig,
    progress: Progress,
) -> list[TuneVariant]:
    """The island search for each dtype to try; a dtype that cannot run here is a variant
    with a note, unless it is the only one."""
    variants = []
    for dt in settled.dtypes:
        try:
            variant = search_islands(
                model,
                cal,
                reference,
                dtype=dt,
                recipe=recipe,
                tolerance=settled.judge(dt),
                options=options,
                progress=progress,
            )
        except DTypeError as exc:
            if len(settled.dtypes) == 1:
                raise
            variant = TuneVariant(dt, note=f"cannot run here: {exc}")
        variants.append(variant)
    return variants


def _report(
    chosen: TuneVariant,
    variants: list[TuneVariant],
    reason: str,
    fp32_latency: float | None,
    batches: int,
    start: float,
) -> TuneReport:
    """The report of the search, its verdict the chosen variant's on its own batches."""
    report = TuneReport(
        dtype=chosen.dtype,
        passed=chosen.passed,
        keep_fp32=chosen.keep_fp32,
        fp32_share=chosen.fp32_share,
        passes=batches + 1 + sum(v.passes for v in variants),  # + the reference check
        seconds=time.perf_counter() - start,
        reason=reason,
        batches=batches,
        variants=variants,
        fp32_latency=fp32_latency,
        op_islands=chosen.op_islands,
        fp32_flops_share=chosen.fp32_flops_share,
        flops_unavailable=chosen.flops_unavailable,
        fp32_outputs=chosen.fp32_outputs,
    )
    report.calibrated = chosen.passed
    return report


def _notes(
    model: nn.Module, cal: list[Any], reference: list[Any], chosen: TuneVariant, tol: Tolerance
) -> list[str]:
    """What the report adds in words: the inputs' own rounding, and little to gain."""
    notes = []
    diag = chosen.diagnosis  # where the search ran one: on the same batches, with tol
    rounding = input_rounding_note(
        diag.input_rounding
        if diag is not None
        else input_rounding(model, cal, reference, chosen.dtype, tol)
    )
    if rounding is not None:
        notes.append(rounding)
    flops = chosen.fp32_flops_share
    if chosen.passed and flops is not None and flops > _LITTLE_GAIN:
        notes.append(
            f"half precision buys little here: {100 * flops:.0f}% of the FLOPs stay in fp32 "
            "to meet the tolerance, so the speed and memory of this model stay near fp32's"
        )
    return notes


def _stable_ops(
    model: nn.Module, found: Recipe, converted: nn.Module, cal: list[Any]
) -> tuple[Recipe, nn.Module]:
    """``found`` and its model, where its op islands by ordinal give the search's outputs;
    else (an op order that differs between batches) the islands found by location."""
    final = convert(model, found)
    if found.op_islands and not _same_outputs(final, converted, cal):
        by_location = recipe_of(converted)
        assert by_location is not None  # a converted model carries its recipe
        found = found.replace(op_islands=by_location.op_islands)
        final = convert(model, found)
    return found, final


def _confirmed(
    model: nn.Module,
    found: Recipe,
    final: nn.Module,
    cal: list[Any],
    held: list[Any],
    tol: Tolerance,
    chosen: TuneVariant,
    report: TuneReport,
) -> tuple[Recipe, nn.Module]:
    """The recipe confirmed on the held-out batches (its scaled GEMM islands made fp32
    where only that passes); a recipe that fails there sets the report's verdict and
    reason."""
    report.confirmation = _confirm(model, final, held, tol)
    if not report.confirmation.passed and any(r.scaled for r in found.op_islands):
        found, final = _unscaled(model, found, final, cal, held, tol, chosen, report)
    if not report.confirmation.passed:
        report.passed = False
        why = "; ".join(report.confirmation.problems) or next(
            (f for o in report.confirmation.outputs for f in o.failures), ""
        )
        report.reason = (
            f"the recipe meets the tolerance on its {len(cal)} calibration batch(es) but "
            f"fails on {len(held)} batch(es) it was not tuned on ({why}); tune on "
            "batches that cover that range"
        )
    return found, final


def _unscaled(
    model: nn.Module,
    recipe: Recipe,
    final: nn.Module,
    cal: list[Any],
    held: list[Any],
    tolerance: Tolerance,
    chosen: TuneVariant,
    report: TuneReport,
) -> tuple[Recipe, nn.Module]:
    """A recipe whose scaled GEMM islands fail confirmation: the same islands in fp32, when
    they meet the tolerance on the calibration and the confirmation batches alike (the
    report then says so); else ``recipe`` and ``final`` as they were."""
    scaled = [r for r in recipe.op_islands if r.scaled]
    fallback = recipe.replace(op_islands=tuple(r.with_kind("fp32") for r in recipe.op_islands))
    wide = convert(model, fallback)
    confirmation = _confirm(model, wide, held, tolerance)
    if not (confirmation.passed and _confirm(model, wide, cal, tolerance).passed):
        return recipe, final
    report.confirmation = confirmation
    report.op_islands = tuple(r.with_kind("fp32") for r in report.op_islands)
    try:
        report.fp32_flops_share = fp32_flops_share(model, wide, cal[0], chosen.op_flops)
    except FlopsUnavailable as exc:
        report.fp32_flops_share, report.flops_unavailable = None, str(exc)
    names = ", ".join(str(r.with_kind("fp32")) for r in scaled)
    report.notes.append(
        f"the scaled half GEMM island(s) {names} met the tolerance on the calibration "
        "batches but not on the confirmation batches, so they are computed in fp32"
    )
    return fallback, wide


_LITTLE_GAIN = 0.5  # fp32 share of FLOPs above which half precision is said to buy little


def _confirm(
    model: nn.Module, final: nn.Module, batches: list[Any], tolerance: Tolerance
) -> Comparison:
    """The tuned model against fp32 on batches the search never saw."""
    reference = run_reference(model, batches)
    with torch.inference_mode():
        outs = [call(final, b) for b in batches]
    return compare_outputs(reference, outs, tolerance=tolerance)


def _same_outputs(a: nn.Module, b: nn.Module, batches: list[Any]) -> bool:
    """Whether ``a`` and ``b`` give bit-identical outputs on every batch."""
    with torch.inference_mode():
        for batch in batches:
            fa, fb = flatten(call(a, batch)), flatten(call(b, batch))
            if fa.keys() != fb.keys() or not all(torch.equal(fa[k], fb[k]) for k in fa):
                return False
    return True


def _final_recipe(
    tuned: nn.Module, batches: list[Any], tolerance: Tolerance, report: TuneReport
) -> Recipe:
    """The tuned model's resolved recipe, its op islands found by ordinal (one call on
    the first batch records them), carrying the tolerance it was judged by and its
    provenance."""
    found = recipe_of(tuned)
    assert found is not None  # a converted model carries its recipe
    ops = found.op_islands
    if any(r.ordinal is None for r in ops):
        with recording_ordinals() as seen, torch.inference_mode():
            call(tuned, batches[0])
        ops = with_ordinals(ops, seen)
    return found.replace(op_islands=ops, tolerance=tolerance, info=tuned_info(report))


def _choose(
    model: nn.Module,
    batches: list[Any],
    variants: list[TuneVariant],
    options: TuneConfig,
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
    runs = options.timing_runs
    halves: list[nn.Module] = []
    for v in passing:
        assert v.model is not None  # set by search_islands for every passing variant
        halves.append(v.model)
    with torch.inference_mode():
        # fp32 and every passing variant in interleaved rounds: a burst of load hits them alike
        timed = measure_interleaved(
            [partial(call, m, first) for m in [model, *halves]], device=device, runs=runs
        )
    fp32_timing, *half_timings = timed
    for v, t in zip(passing, half_timings, strict=True):
        v.latency = t.median
    best = fastest_accurate(passing[0], passing, lambda v: v.latency, lambda v: v.passed)
    best_t = half_timings[passing.index(best)]
    order = sorted(
        range(len(passing)), key=lambda i: (passing[i] is not best, half_timings[i].median)
    )
    times = ", ".join(f"{dtype_name(v.dtype)} {1e3 * (v.latency or 0):.1f} ms" for v in passing)
    why = (
        f"auto: fastest variant meeting the tolerance (median of {len(fp32_timing.samples)} "
        "interleaved rounds on "
        f"batch 0: {times}; fp32 {1e3 * fp32_timing.median:.1f} ms)"
    )
    runner_up = half_timings[order[1]]
    against = ratio_of(runner_up, best_t)
    if not against.ranked:
        why += (
            f"; {dtype_name(best.dtype)} against {dtype_name(passing[order[1]].dtype)}: "
            f"{spread_text(against)}"
        )
    speed = ratio_of(fp32_timing, best_t)
    why += f"; against fp32: {spread_text(speed)}"
    if speed.ranked and speed.q3 < 1:
        why += "; fp32 is faster on this device, so half precision only saves memory here"
    return best, why, fp32_timing.median
