"""The main job: convert a model, run fp32 and half side by side, and report.

``check(model, inputs)`` returns a :class:`CheckResult` with the accuracy comparison,
model sizes, and the latencies of fp32 and half timed in interleaved rounds, so that their
speed ratio comes with its spread (:class:`~halfprec.timing.Ratio`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from halfprec.batch import as_batches, call
from halfprec.compare import Comparison, compare
from halfprec.convert.core import ConversionReport, conversion_report, convert, recipe_of
from halfprec.convert.recipe import RecipeLike
from halfprec.generate import Generation, agreement, check_room, prompts_from_batches
from halfprec.modules import evaluating, model_device
from halfprec.timing import Ratio, Timing, measure_interleaved, ratio_of
from halfprec.tolerance import Tolerance


@dataclass
class CheckResult:
    """Accuracy, size and speed of a half model against its fp32 reference."""

    name: str
    comparison: Comparison
    conversion: ConversionReport
    latency_fp32: Timing | None
    latency_half: Timing | None
    generation: Generation | None = None

    @property
    def passed(self) -> bool:
        return self.comparison.passed

    @property
    def speed(self) -> Ratio | None:
        """fp32 time / half time over the interleaved rounds: median, quartiles, verdict."""
        if self.latency_fp32 is None or self.latency_half is None:
            return None
        return ratio_of(self.latency_fp32, self.latency_half)

    @property
    def speedup(self) -> float | None:
        """The median of the per-round ratios (``speed.median``)."""
        speed = self.speed
        return None if speed is None else speed.median

    def to_json(self) -> dict[str, Any]:
        def lat(t: Timing | None) -> float | None:
            return None if t is None else t.median

        return {
            "model": self.name,
            "passed": self.passed,
            "conversion": self.conversion.to_json(),
            "comparison": self.comparison.to_json(),
            "latency_fp32_s": lat(self.latency_fp32),
            "latency_half_s": lat(self.latency_half),
            "speedup": self.speedup,
            "speedup_spread": None if self.speed is None else self.speed.to_json(),
            "bytes_fp32": self.conversion.bytes_before,
            "bytes_half": self.conversion.bytes_after,
            "generation": None if self.generation is None else self.generation.to_json(),
        }


def check(
    model: nn.Module,
    inputs: Any,
    recipe: RecipeLike = None,
    *,
    tolerance: Tolerance | None = None,
    runs: int = 10,
    name: str = "",
    generate: int = 0,
) -> CheckResult:
    """Convert a copy of ``model`` (``recipe``: a :class:`Recipe`, a dtype or a recipe
    file, default ``"auto"``), compare it with ``model`` on ``inputs``, and time both.
    ``tolerance`` judges the comparison; default: the recipe's.

    ``runs``: interleaved rounds of one fp32 and one half call each (``runs=0`` skips
    timing); the speed ratio is ranked only when its interquartile range over the rounds
    lies on one side of 1. ``generate > 0`` (causal LMs) also greedy-decodes that many
    tokens from prompts taken from ``inputs``' ``input_ids`` and scores the half model's
    agreement (:func:`halfprec.generate.agreement`); prompts that many tokens would make
    longer than the model takes are refused before anything runs. ``model`` itself is not
    changed.
    """
    prompts = prompts_from_batches(as_batches(inputs)) if generate > 0 else []
    if generate > 0:
        check_room(model, prompts, generate)
    with evaluating(model) as reference:
        half = convert(reference, recipe)
        report = conversion_report(half)
        resolved = recipe_of(half)  # the recipe as convert read it (a file is read once)
        assert report is not None and resolved is not None  # set by convert; not user input
        settled = resolved.settle(model_device(reference), tolerance)
        comparison = compare(reference, half, inputs, tolerance=settled.judge(report.dtype))
        lat32 = lat16 = None
        if runs > 0 and comparison.outputs:
            first = as_batches(inputs)[0]
            device = model_device(reference)
            with torch.inference_mode():
                lat32, lat16 = measure_interleaved(
                    [lambda: call(reference, first), lambda: call(half, first)],
                    device=device,
                    runs=runs,
                )
        generation = None
        if generate > 0:
            generation = agreement(reference, half, prompts, generate)
    return CheckResult(name or type(model).__name__, comparison, report, lat32, lat16, generation)
