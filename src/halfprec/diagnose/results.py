"""What :func:`~halfprec.diagnose.diagnose` finds: one :class:`ModuleDiagnosis` per module,
the :class:`Divergence` (where the half run first goes wrong and whom to blame) and the
whole :class:`Diagnosis`. Rendering lives in :mod:`halfprec.report.diagnose`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from halfprec.compare import Comparison
from halfprec.diagnose.ops import OpDiagnosis
from halfprec.diagnose.problems import handed_problem, local_problem
from halfprec.dtypes import dtype_name
from halfprec.errorstats import ErrorStats


@dataclass
class ModuleDiagnosis:
    """One module (all its calls, all batches), half against fp32."""

    index: int
    name: str
    type: str
    params: int
    calls: int = 0
    input_max_abs: float = 0.0
    local: ErrorStats = field(default_factory=ErrorStats)
    accumulated: ErrorStats = field(default_factory=ErrorStats)
    reached: bool = False
    local_exception: str | None = None
    half_exception: str | None = None
    leak: str | None = None
    handed: ErrorStats = field(default_factory=ErrorStats)  # inputs it hands its callees

    @property
    def display_name(self) -> str:
        return self.name or "(model)"

    @property
    def fp32_max_abs(self) -> float:
        return self.local.ref_peak

    @property
    def local_error(self) -> float:
        return self.local.rel_error

    @property
    def accumulated_error(self) -> float | None:
        """None when the half run raised before reaching this module."""
        return self.accumulated.rel_error if self.reached else None

    @property
    def flags(self) -> list[str]:
        out = []
        if self.local_exception or self.half_exception:
            out.append("raises")
        if self.local.nonfinite or self.accumulated.nonfinite:
            out.append("inf/nan")
        if self.local.beyond_range:
            out.append("beyond-range")
        if self.local.flushed:
            out.append("underflow")
        if self.leak:
            out.append("dtype-leak")
        return out

    def problem(self, threshold: float, dtype: torch.dtype) -> str | None:
        """Why this module's own half computation is broken, or None."""
        return local_problem(
            self.local, self.local_exception, self.leak, threshold, dtype
        ) or handed_problem(self.handed, threshold, dtype)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "type": self.type,
            "params": self.params,
            "calls": self.calls,
            "fp32_max_abs": self.fp32_max_abs,
            "input_max_abs": self.input_max_abs,
            "beyond_range": self.local.beyond_range,
            "local_error": self.local_error,
            "accumulated_error": self.accumulated_error,
            "local_nonfinite": self.local.nonfinite,
            "accumulated_nonfinite": self.accumulated.nonfinite,
            "flushed": self.local.flushed,
            "local_exception": self.local_exception,
            "half_exception": self.half_exception,
            "dtype_leak": self.leak,
            "flags": self.flags,
        }


@dataclass(frozen=True)
class Divergence:
    """Where the half run first goes wrong, and the module to blame."""

    module: str
    type: str
    call: int
    batch: int
    reason: str
    culprit: str
    culprit_type: str
    culprit_reason: str
    culprit_op: str | None = None  # the worst op of the culprit's own code, when one breaks

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Diagnosis:
    """The result of :func:`diagnose`. Render with :mod:`halfprec.report.diagnose`."""

    dtype: torch.dtype
    threshold: float
    modules: list[ModuleDiagnosis]
    divergence: Divergence | None
    output: Comparison
    batches: int
    seconds: float
    half_model: str
    ops: list[OpDiagnosis] = field(default_factory=list)
    # the fp32 model on its inputs rounded to ``dtype``; None when rounding changes nothing
    input_rounding: Comparison | None = None

    @property
    def inputs_break(self) -> bool:
        """Rounding the inputs alone, with the model in fp32, fails the tolerance."""
        return self.input_rounding is not None and not self.input_rounding.passed

    @property
    def passed(self) -> bool:
        return self.output.passed

    @property
    def culprit(self) -> str | None:
        return self.divergence.culprit if self.divergence is not None else None

    def __getitem__(self, name: str) -> ModuleDiagnosis:
        for m in self.modules:
            if m.name == name:
                return m
        raise KeyError(f"no module {name!r} was called; see Diagnosis.modules")

    def problems(self) -> list[ModuleDiagnosis]:
        """Modules whose own half computation is broken, in execution order."""
        return [m for m in self.modules if m.problem(self.threshold, self.dtype) is not None]

    def problem_ops(self, module: str | None = None) -> list[OpDiagnosis]:
        """Ops whose own half computation breaks (of ``module`` only, if given), worst first."""
        found = [
            o
            for o in self.ops
            if (module is None or o.ref.module == module)
            and o.problem(self.threshold, self.dtype) is not None
        ]
        return sorted(found, key=lambda o: o.severity(), reverse=True)

    def worst(self, n: int = 15) -> list[ModuleDiagnosis]:
        """The ``n`` worst offenders: raising, then inf/NaN, then by local error."""

        def key(m: ModuleDiagnosis) -> tuple[int, int, float]:
            raises = bool(m.local_exception or m.half_exception or m.leak)
            return (-int(raises), -int(m.local.nonfinite > 0), -m.local_error)

        return sorted(self.modules, key=key)[:n]

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": dtype_name(self.dtype),
            "half_model": self.half_model,
            "threshold": self.threshold,
            "batches": self.batches,
            "seconds": self.seconds,
            "passed": self.passed,
            "divergence": self.divergence.to_json() if self.divergence else None,
            "output": self.output.to_json(),
            "modules": [m.to_json() for m in self.modules],
            "ops": [o.to_json() for o in self.ops],
            "input_rounding": (
                None if self.input_rounding is None else self.input_rounding.to_json()
            ),
        }
