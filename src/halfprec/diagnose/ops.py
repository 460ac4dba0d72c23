"""Error of single ops inside one module's own code, half against fp32 on the same inputs.

While a module runs in half (its callees replaced by their recorded fp32 results, see
:mod:`halfprec.diagnose`), :class:`OpProbe` computes each of the module's own ops twice:
as called, and on fp32 copies of the same inputs. What differs is the error that op itself
adds: values beyond the dtype's range, inf/NaN it creates, results flushed to zero, or an
exception (a constant that does not fit). An op that raises continues with its fp32 result,
saturated to the dtype, so later ops are still measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from halfprec.convert.op_islands import OpRef, OwnOpMode
from halfprec.dtypes import dtype_name, range_of
from halfprec.errorstats import ErrorStats
from halfprec.fp32 import exact_fp32
from halfprec.modules import first_line
from halfprec.tree import iter_tensors, map_tensors


@dataclass
class OpDiagnosis:
    """One op of one module's own code (all probed calls)."""

    ref: OpRef
    calls: int = 0
    stats: ErrorStats = field(default_factory=ErrorStats)
    flushed: int = 0
    exception: str | None = None
    flops: int = 0  # of one call; elementwise ops count one per output element

    def problem(self, threshold: float, dtype: torch.dtype) -> str | None:
        name = dtype_name(dtype)
        s = self.stats
        if self.exception:
            return f"raises in {name}: {self.exception}"
        if s.nonfinite:
            if s.beyond_range:
                return f"overflows: fp32 values reach {s.ref_peak:.3g}, beyond the {name} max"
            return f"makes inf/NaN in {name}"
        if s.beyond_range:
            return f"fp32 values reach {s.ref_peak:.3g}, beyond the {name} max"
        if self.flushed:
            return f"{self.flushed} results flushed to 0 in {name}"
        if s.rel_error > threshold:
            return f"relative error {s.rel_error:.3g} > {threshold:.3g}"
        return None

    def severity(self) -> tuple[int, float]:
        s = self.stats
        level = 4 if self.exception else 3 if s.nonfinite else 2 if s.beyond_range else 1
        level = (
            level if (self.exception or s.nonfinite or s.beyond_range) else int(self.flushed > 0)
        )
        return (level, s.rel_error if math.isfinite(s.rel_error) else 1e30)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.ref.to_json(),
            "calls": self.calls,
            "rel_error": self.stats.rel_error,
            "fp32_max_abs": self.stats.ref_peak,
            "nonfinite": self.stats.nonfinite,
            "beyond_range": self.stats.beyond_range,
            "flushed": self.flushed,
            "exception": self.exception,
            "flops": self.flops,
        }


def _wide_copy(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32, copy=True) if t.is_floating_point() else t.clone()


class OpProbe(OwnOpMode):
    """Measures the module's own ops; results go into ``found`` (keyed by :class:`OpRef`)."""

    def __init__(
        self, module: nn.Module, name: str, dtype: torch.dtype, found: dict[OpRef, OpDiagnosis]
    ) -> None:
        super().__init__(module)
        self.name, self.dtype, self.found = name, dtype, found
        self.limits = range_of(dtype)

    def on_own_op(
        self, func: Callable[..., Any], ref: OpRef, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if not any(t.dtype == self.dtype for _, t in iter_tensors((args, kwargs))):
            return func(*args, **kwargs)
        ref_key = OpRef(self.name, ref.op, ref.location, ref.occurrence)
        try:
            # the op's reference is IEEE fp32 wherever the probe runs, whatever the caller set
            with FlopCounterMode(display=False) as counter, exact_fp32():
                wide = func(*map_tensors(_wide_copy, args), **map_tensors(_wide_copy, kwargs))
        except Exception:  # noqa: BLE001 - ops fp32 cannot run are not ours to measure
            return func(*args, **kwargs)
        rec = self.found.get(ref_key)
        if rec is None:
            rec = self.found[ref_key] = OpDiagnosis(ref_key)
            numel = sum(t.numel() for _, t in iter_tensors(wide))
            rec.flops = int(counter.get_total_flops()) or numel
        rec.calls += 1
        try:
            out = func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a failing op is the finding
            rec.exception = rec.exception or first_line(exc)
            return map_tensors(self._saturate, wide)
        zeroed = rec.stats.zeroed
        rec.stats.add(wide, out, self.limits)  # one read per output tensor
        rec.flushed += rec.stats.zeroed - zeroed
        return out

    def _saturate(self, t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t
        return t.clamp(-self.limits.max, self.limits.max).to(self.dtype)
