"""Error statistics of one module's outputs, half against fp32, accumulated over calls.

Used by :mod:`halfprec.diagnose` for both the *local* error (the module alone in half on
its fp32 inputs) and the *accumulated* error (the module inside the full half run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from halfprec.dtypes import NumericRange
from halfprec.tree import flatten

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
        if r.dtype not in (torch.float32, torch.float64):
            r = r.float()
        diff = r - c  # promotes the half side to r's dtype in the same kernel
        ref_sq = float(torch.linalg.vector_norm(r)) ** 2
        err_sq = float(torch.linalg.vector_norm(diff)) ** 2
        peak = float(torch.linalg.vector_norm(r, ord=math.inf)) if r.numel() else 0.0
        self.elements += r.numel()
        if math.isfinite(ref_sq) and math.isfinite(err_sq) and math.isfinite(peak):
            self.ref_peak = max(self.ref_peak, peak)
            if peak > limits.max:
                self.beyond_range += int((r.abs() > limits.max).sum())
            if err_sq > 1e-4 * ref_sq:  # only look for flushed values where the error shows
                self.flushed += int(((c == 0) & (r != 0)).sum())
            self.ref_sq += ref_sq
            self.err_sq += err_sq
            return
        self._add_nonfinite(r.to(torch.float64), c.to(r.device, torch.float64), limits)

    def _add_nonfinite(self, r: torch.Tensor, c: torch.Tensor, limits: NumericRange) -> None:
        """The slow path, when either side holds inf/NaN: only positions finite in both count."""
        ref_ok = torch.isfinite(r)
        cand_ok = torch.isfinite(c)
        self.nonfinite += int((ref_ok & ~cand_ok).sum())
        both = ref_ok & cand_ok
        absr = torch.where(ref_ok, r, 0.0).abs()
        if absr.numel():
            self.ref_peak = max(self.ref_peak, float(absr.max()))
        self.beyond_range += int((absr > limits.max).sum())
        rf = torch.where(both, r, 0.0)
        cf = torch.where(both, c, 0.0)
        self.flushed += int(((rf != 0) & (cf == 0)).sum())
        self.ref_sq += float((rf * rf).sum())
        self.err_sq += float(((rf - cf) ** 2).sum())
