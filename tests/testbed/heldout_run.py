"""Scoring the held-out hazards (:mod:`testbed.heldout`): four ways to run a
model in half precision, each judged by :func:`halfprec.compare` against fp32 on all of
the hazard's batches with halfprec's default tolerance for the dtype.

- *naive*: ``copy.deepcopy(model).to(dtype)``, floating inputs cast to ``dtype``;
- *autocast*: the fp32 model under ``torch.autocast(device_type, dtype)``;
- *convert*: ``halfprec.convert(model, dtype)`` with its defaults;
- *tune*: ``halfprec.tune(model, [batch 0], dtype)``, judged on every batch.

A variant that raises fails, and its :class:`Score` keeps the first line of the error.
Used by benchmarks/heldout.py and tests/testbed/test_heldout.py.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.compare import compare
from halfprec.convert.core import convert
from halfprec.dtypes import dtype_name
from halfprec.modules import first_line, model_device
from halfprec.tolerance import Tolerance
from halfprec.tree import map_tensors
from halfprec.tune import tune
from testbed.hazards import Hazard

__all__ = ["VARIANTS", "NaiveHalf", "Autocast", "Score", "HazardRun", "score", "run", "markdown"]

VARIANTS = ("naive", "autocast", "convert", "tune")


class NaiveHalf(nn.Module):
    """``copy.deepcopy(model).to(dtype)`` that casts its floating inputs to ``dtype``."""

    def __init__(self, model: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.model = copy.deepcopy(model).to(dtype)
        self.dtype = dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        def cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(self.dtype) if t.is_floating_point() else t

        return self.model(*map_tensors(cast, args), **map_tensors(cast, kwargs))


class Autocast(nn.Module):
    """The fp32 ``model`` (not copied, not changed) run under ``torch.autocast``."""

    def __init__(self, model: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.model = model
        self.dtype = dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=model_device(self.model).type, dtype=self.dtype):
            return self.model(*args, **kwargs)


@dataclass(frozen=True)
class Score:
    """One variant on one hazard in one dtype: ``passed``, and why (``reason``). For tune,
    where it found a recipe: its fp32 ``islands`` (modules and ops) and their share of
    the FLOPs (None where tune counted none)."""

    passed: bool
    reason: str
    raised: bool = False
    fp32_flops_share: float | None = None
    islands: tuple[str, ...] | None = None


def _judge(model: nn.Module, candidate: nn.Module, batches: list[Any], dtype: torch.dtype) -> Score:
    cmp = compare(model, candidate, batches, tolerance=Tolerance.for_dtype(dtype))
    raised = any("the half model raised" in p for p in cmp.problems)  # "batch i: ..."
    return Score(cmp.passed, cmp.reason, raised=raised)


def _tune(model: nn.Module, batches: list[Any], dtype: torch.dtype) -> Score:
    result = tune(model, batches[:1], dtype)
    if result.model is None:
        variant = result.report.variants[0]
        tried = ", ".join(variant.candidates) or "none"
        why = variant.note or result.report.reason
        return Score(False, f"tune found no recipe on batch 0: {why} (candidates: {tried})")
    report = result.report
    share = report.fp32_flops_share
    islands = (
        *(f"module {m}" for m in report.keep_fp32),
        *(str(o) for o in report.op_islands),
        *(f"{m} hands on fp32" for m in report.fp32_outputs),
    )
    judged = _judge(model, result.model, batches, dtype)
    return Score(judged.passed, judged.reason, fp32_flops_share=share, islands=islands)


def score(variant: str, model: nn.Module, batches: list[Any], dtype: torch.dtype) -> Score:
    """Run ``variant`` (one of :data:`VARIANTS`) of ``model`` in ``dtype`` and judge it on
    ``batches``. ``model`` is not changed."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    try:
        if variant == "tune":
            return _tune(model, batches, dtype)
        candidate = {
            "naive": lambda: NaiveHalf(model, dtype),
            "autocast": lambda: Autocast(model, dtype),
            "convert": lambda: convert(model, dtype),
        }[variant]()
        return _judge(model, candidate, batches, dtype)
    except Exception as exc:  # a variant that raises fails; the run goes on
        return Score(False, f"raised {type(exc).__name__}: {first_line(exc)}", raised=True)


@dataclass
class HazardRun:
    """Every variant of one hazard, per dtype: ``scores[dtype][variant]``."""

    hazard: Hazard
    scores: dict[torch.dtype, dict[str, Score]] = field(default_factory=dict)
    seconds: float = 0.0


def run(
    hazard: Hazard, dtypes: tuple[torch.dtype, ...], variants: tuple[str, ...] = VARIANTS
) -> HazardRun:
    """Build ``hazard`` once and score each variant in each dtype."""
    start = time.perf_counter()
    model, batches = hazard.build()
    out = HazardRun(hazard)
    for dt in dtypes:
        out.scores[dt] = {v: score(v, model, batches, dt) for v in variants}
    out.seconds = time.perf_counter() - start
    return out


# markdown ------------------------------------------------------------------------------


def _cell(s: Score | None) -> str:
    if s is None:
        return "-"
    return "PASS" if s.passed else ("FAIL (raises)" if s.raised else "FAIL")


def _share(x: float | None) -> str:
    return "no FLOPs counted" if x is None else f"{100 * x:.1f}%"


def markdown(runs: list[HazardRun]) -> str:
    """The table (a row per hazard, a column per variant and dtype), the totals per dtype,
    tune's fp32 share of FLOPs, and the reason for every failure."""
    dtypes = list(dict.fromkeys(dt for r in runs for dt in r.scores))
    variants = list(dict.fromkeys(v for r in runs for s in r.scores.values() for v in s))
    head = ["hazard"] + [f"{v} {dtype_name(dt)}" for v in variants for dt in dtypes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        cells = [r.hazard.name] + [_cell(r.scores[dt].get(v)) for v in variants for dt in dtypes]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    n = len(runs)
    for dt in dtypes:
        totals = ", ".join(
            f"{v} {sum(r.scores[dt][v].passed for r in runs if v in r.scores[dt])}/{n}"
            for v in variants
        )
        lines.append(f"- {dtype_name(dt)}: {totals}")
    if "tune" in variants:
        lines += ["", "tune's fp32 islands and their share of FLOPs, where it found a recipe:", ""]
        for r in runs:
            found = [
                f"{dtype_name(dt)} {_share(s.fp32_flops_share)} ({'; '.join(s.islands) or 'none'})"
                for dt in dtypes
                for s in [r.scores[dt].get("tune")]
                if s is not None and s.islands is not None
            ]
            lines.append(f"- {r.hazard.name}: {', '.join(found) or 'no recipe'}")
    reasons = [
        f"- {r.hazard.name}, {v} {dtype_name(dt)}: {s.reason}"
        for r in runs
        for dt in dtypes
        for v, s in r.scores[dt].items()
        if not s.passed
    ]
    return "\n".join(lines + (["", "Why each failure failed:", "", *reasons] if reasons else []))
