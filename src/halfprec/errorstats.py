"""Error statistics of one module's outputs, half against fp32, accumulated over calls.

Used by :mod:`halfprec.diagnose` for both the *local* error (the module alone in half on
its fp32 inputs) and the *accumulated* error (the module inside the full half run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .dtypes import NumericRange
from .tree import flatten

__all__ = ["ErrorStats", "relative_threshold"]


def relative_threshold(min_sqnr_db: float | None) -> float:
    """The relative RMS error that corresponds to an SQNR bound (25 dB -> 0.056)."""
    return 10 ** (-(min_sqnr_db if min_sqnr_db is not None else 25.0) / 20)


@dataclass
class ErrorStats:
    """Running sums over the floating outputs of one or more calls (float64)."""

    ref_sq: float = 0.0
    err_sq: float = 0.0
    ref_peak: float = 0.0
    nonfinite: int = 0
    beyond_range: int = 0
    flushed: int = 0
    elements: int = 0

    @property
    def rel_error(self) -> float:
        """Relative RMS error ``||half - fp32|| / ||fp32||``; inf when half made inf/NaN."""
        if self.nonfinite:
            return math.inf
        if self.err_sq == 0:
            return 0.0
        if self.ref_sq == 0:
            return math.inf
        return math.sqrt(self.err_sq / self.ref_sq)

    def merge(self, other: ErrorStats) -> None:
        self.ref_sq += other.ref_sq
        self.err_sq += other.err_sq
        self.ref_peak = max(self.ref_peak, other.ref_peak)
        self.nonfinite += other.nonfinite
        self.beyond_range += other.beyond_range
        self.flushed += other.flushed
        self.elements += other.elements

    def add(self, reference: Any, candidate: Any, limits: NumericRange) -> bool:
        """Add one call's outputs; False when their structures do not match."""
        ref, cand = flatten(reference), flatten(candidate)
        matched = True
        for path, r in ref.items():
            if not r.is_floating_point():
                continue
            c = cand.get(path)
            if c is None or c.shape != r.shape or not c.is_floating_point():
                matched = False
                continue
            self._add_tensor(r.detach(), c.detach(), limits)
        return matched

    def _add_tensor(self, r: torch.Tensor, c: torch.Tensor, limits: NumericRange) -> None:
        r64 = r.to(torch.float64)
        c64 = c.to(device=r.device, dtype=torch.float64)
        ref_ok = torch.isfinite(r64)
        cand_ok = torch.isfinite(c64)
        self.nonfinite += int((ref_ok & ~cand_ok).sum())
        both = ref_ok & cand_ok
        absr = torch.where(ref_ok, r64, 0.0).abs()
        if absr.numel():
            self.ref_peak = max(self.ref_peak, float(absr.max()))
        self.beyond_range += int((absr > limits.max).sum())
        rf = torch.where(both, r64, 0.0)
        cf = torch.where(both, c64, 0.0)
        self.flushed += int(((rf != 0) & (cf == 0)).sum())
        self.ref_sq += float((rf * rf).sum())
        self.err_sq += float(((rf - cf) ** 2).sum())
        self.elements += r.numel()
