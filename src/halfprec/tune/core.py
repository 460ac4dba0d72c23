"""``tune``: check that fp32 reproduces itself, search each candidate dtype, and choose
between the dtypes that meet the tolerance (step 5 of :mod:`halfprec.tune`)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import torch
from torch import nn

from halfprec.batch import as_batches, call
from halfprec.compare import Tolerance, compare_outputs, run_reference
from halfprec.convert.core import ConfigLike, ConvertConfig
from halfprec.dtypes import dtype_name, is_auto
from halfprec.errors import DTypeError
from halfprec.modules import model_device
from halfprec.timing import measure_interleaved, ratio_of, spread_text
from halfprec.tune.results import (
    ToleranceUnreachableError,
    TuneConfig,
    TuneReport,
    TuneResult,
    TuneVariant,
)
from halfprec.tune.search import Progress, _Search

__all__ = ["tune"]


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
    ``tolerance`` on every calibration batch in ``inputs`` (see :mod:`halfprec.tune`).

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
    halves: list[nn.Module] = []
    for v in passing:
        assert v.model is not None  # set by _Search.run for every passing variant
        halves.append(v.model)
    with torch.inference_mode():
        # fp32 and every passing variant in interleaved rounds: a burst of load hits them alike
        timed = measure_interleaved(
            [partial(call, m, first) for m in [model, *halves]], device=device, runs=runs
        )
    fp32_timing, *half_timings = timed
    for v, t in zip(passing, half_timings, strict=True):
        v.latency = t.median
    order = sorted(range(len(passing)), key=lambda i: half_timings[i].median)
    best, best_t = passing[order[0]], half_timings[order[0]]
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
