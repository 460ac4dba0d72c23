"""What :func:`halfprec.tune` is told (:class:`TuneConfig`) and what it finds: each tried
set of islands, the search per dtype, the report and the result with its recipe."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec._version import __version__
from halfprec.compare import Comparison
from halfprec.convert.op_islands import OpRef
from halfprec.convert.recipe import Recipe
from halfprec.diagnose import Diagnosis
from halfprec.dtypes import dtype_name
from halfprec.errors import HalfprecError


class ToleranceUnreachableError(HalfprecError):
    """Even fp32 against itself misses the tolerance: no set of islands can meet it."""


@dataclass(frozen=True)
class TuneConfig:
    """How hard :func:`tune` searches, checked on construction. (What to convert to, the
    islands every try keeps and the tolerance come from the :class:`~halfprec.Recipe`.)"""

    max_evaluations: int = 40
    timing_runs: int = 5

    def __post_init__(self) -> None:
        if self.max_evaluations < 1:
            raise ValueError(f"max_evaluations must be >= 1, got {self.max_evaluations}")
        if self.timing_runs < 1:
            raise ValueError(f"timing_runs must be >= 1, got {self.timing_runs}")


@dataclass(frozen=True)
class Evaluation:
    """One tried set of islands."""

    keep_fp32: tuple[str, ...]
    passed: bool
    passes: int
    detail: str
    op_islands: tuple[OpRef, ...] = ()
    fp32_outputs: tuple[str, ...] = ()  # islands that handed their outputs on in fp32

    def to_json(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "keep_fp32": list(self.keep_fp32),
            "op_islands": [str(o) for o in self.op_islands],
            "fp32_outputs": list(self.fp32_outputs),
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
    flops_unavailable: str = ""  # why the FLOP share could not be counted
    fp32_outputs: tuple[str, ...] = ()
    passes: int = 0
    evaluations: list[Evaluation] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    diagnosis: Diagnosis | None = None
    comparison: Comparison | None = None
    latency: float | None = None
    note: str = ""
    model: nn.Module | None = field(default=None, repr=False)
    op_flops: dict[OpRef, int] = field(default_factory=dict, repr=False)  # the ops' FLOPs

    def to_json(self) -> dict[str, Any]:
        div = self.diagnosis.divergence if self.diagnosis is not None else None
        return {
            "dtype": dtype_name(self.dtype),
            "passed": self.passed,
            "keep_fp32": list(self.keep_fp32),
            "fp32_share": self.fp32_share,
            "op_islands": [o.to_json() for o in self.op_islands],
            "fp32_flops_share": self.fp32_flops_share,
            "flops_unavailable": self.flops_unavailable or None,
            "fp32_outputs": list(self.fp32_outputs),
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
    flops_unavailable: str = ""  # why the FLOP share could not be counted
    fp32_outputs: tuple[str, ...] = ()  # islands whose outputs are handed on in fp32
    calibrated: bool | None = None  # the search's verdict on its own batches
    confirmation: Comparison | None = None  # the recipe on batches the search never saw
    notes: list[str] = field(default_factory=list)

    @property
    def confirmed(self) -> bool | None:
        """The verdict on the confirmation batches (None: there were none)."""
        return self.confirmation.passed if self.confirmation is not None else None

    def to_json(self) -> dict[str, Any]:
        cmp = self.confirmation
        return {
            "dtype": dtype_name(self.dtype),
            "passed": self.passed,
            "calibrated": self.calibrated,
            "confirmed": self.confirmed,
            "confirmation": cmp.to_json() if cmp is not None else None,
            "notes": self.notes,
            "keep_fp32": list(self.keep_fp32),
            "fp32_share": self.fp32_share,
            "op_islands": [o.to_json() for o in self.op_islands],
            "fp32_flops_share": self.fp32_flops_share,
            "flops_unavailable": self.flops_unavailable or None,
            "fp32_outputs": list(self.fp32_outputs),
            "passes": self.passes,
            "seconds": self.seconds,
            "reason": self.reason,
            "batches": self.batches,
            "fp32_latency_s": self.fp32_latency,
            "variants": [v.to_json() for v in self.variants],
        }


@dataclass
class TuneResult:
    """``recipe``: what tune found, a resolved :class:`~halfprec.Recipe` (every island by
    name, op islands by ordinal) that ``convert``, ``check``, ``save`` and ``load`` take
    as it is, and that ``recipe.save(path)`` writes as JSON; None when no set of islands
    met the tolerance. ``model``: the model converted with it. ``report``: the search.
    ``given``: the recipe tune was given, whose islands every try kept."""

    model: nn.Module | None
    report: TuneReport
    given: Recipe = field(default_factory=Recipe)
    recipe: Recipe | None = None

    @property
    def keep_fp32(self) -> tuple[str, ...]:
        return self.report.keep_fp32

    @property
    def passed(self) -> bool:
        return self.report.passed

    def require_recipe(self) -> Recipe:
        """The recipe, or a :class:`HalfprecError` saying why there is none."""
        if self.recipe is None:
            raise HalfprecError(
                "tune found no set of fp32 islands that meets the tolerance, so there is no "
                "recipe to write; loosen the tolerance or raise max_evaluations"
            )
        return self.recipe


def tuned_info(report: TuneReport) -> dict[str, Any]:
    """The provenance a tuned recipe carries in its ``info``."""
    return {
        "tool": f"halfprec {__version__} tune",
        "fp32_share": report.fp32_share,
        "passes": report.passes,
        "batches": report.batches,
        "reason": report.reason,
    }
