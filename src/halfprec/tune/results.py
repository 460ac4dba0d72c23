"""What :func:`halfprec.tune` is told (:class:`TuneConfig`) and what it finds: each tried
set of islands, the search per dtype, the report and the result with its policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec._version import __version__
from halfprec.compare import Comparison, Tolerance
from halfprec.convert.core import ConvertConfig
from halfprec.convert.op_islands import OpRef
from halfprec.convert.policy import Policy
from halfprec.diagnose import Diagnosis
from halfprec.dtypes import dtype_name
from halfprec.errors import HalfprecError

__all__ = [
    "TuneConfig",
    "Evaluation",
    "TuneVariant",
    "TuneReport",
    "TuneResult",
    "ToleranceUnreachableError",
]


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
