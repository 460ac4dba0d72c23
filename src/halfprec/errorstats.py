"""Error statistics of half outputs against fp32, accumulated over tensors and calls.

The one accumulator behind :func:`halfprec.compare.compare` (a model's outputs) and
:mod:`halfprec.diagnose` (every module's *local* and *accumulated* error).

Non-finite values are matched position by position: a candidate value agrees with a
non-finite reference value only if both are NaN, or both are inf of the same sign, at the
same place; every other non-finite position is a mismatch (``nonfinite``). The error sums
(and ``compared``) cover the positions finite on both sides. Complex tensors are compared
as their real and imaginary parts.

The sums are taken in the reference's dtype when that is exact enough, else in float64:
fp32 squares of values below about 1e-19 underflow, and an fp16 output that flushed such
values to zero must not read as "0 == 0, equal". Two tensors are called equal only when
their largest difference is 0; where even float64 cannot square the values (float64
references below about 1e-154) the metrics are NaN, which fails every threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from halfprec.dtypes import NumericRange
from halfprec.tree import flatten


def relative_threshold(min_sqnr_db: float | None) -> float:
    """The relative RMS error that corresponds to an SQNR bound (25 dB -> 0.056)."""
    return 10 ** (-(min_sqnr_db if min_sqnr_db is not None else 25.0) / 20)


def as_real(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as its (real, imag) pairs in float64; other tensors unchanged."""
    if t.is_complex():
        return torch.view_as_real(t.to(torch.complex128).resolve_conj())
    return t


def aligned(reference: torch.Tensor, candidate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The one place an fp32 result meets another: both tensors, detached, on one device.

    Where they already share a device they stay there (a GPU compares on the GPU); where
    they do not (a CUDA reference against an ONNX or TorchScript file run on the CPU) both
    go to the CPU, which every runtime's outputs can reach. Dtypes are left as they are:
    :class:`ErrorStats` widens them (float64 where fp32 sums could underflow). A tensor on
    the meta device holds no values, so comparing one raises ``ValueError`` instead of
    passing on nothing."""
    for t, what in ((reference, "reference"), (candidate, "compared")):
        if t.is_meta:
            raise ValueError(
                f"the {what} tensor {tuple(t.shape)} is on the meta device and holds no "
                "values, so nothing can be compared; load the model's weights (to_empty "
                "and load_state_dict, or from_pretrained) before comparing"
            )
    r, c = reference.detach(), candidate.detach()
    if r.device != c.device:
        r, c = r.cpu(), c.cpu()
    return r, c


_SUMMED = (
    "elements",
    "compared",
    "nonfinite",
    "reference_nonfinite",
    "sum_abs",
    "ref_sq",
    "cand_sq",
    "err_sq",
    "beyond_range",
    "flushed",
    "zeroed",
)


@dataclass
class ErrorStats:
    """Running sums (float64) over pairs of reference and candidate tensors."""

    elements: int = 0  # positions seen
    compared: int = 0  # positions finite on both sides: the ones in the sums below
    nonfinite: int = 0  # positions whose non-finite value does not match (see module doc)
    reference_nonfinite: int = 0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    ref_sq: float = 0.0
    cand_sq: float = 0.0
    err_sq: float = 0.0
    ref_peak: float = 0.0
    beyond_range: int = 0
    flushed: int = 0  # zeroed positions, counted where the error shows
    zeroed: int = 0  # positions finite on both sides that are 0 in the candidate only

    @property
    def rel_error(self) -> float:
        """Relative RMS error ``||half - fp32|| / ||fp32||``; inf when inf/NaN do not match."""
        if self.nonfinite:
            return math.inf
        if self.err_sq == 0:
            return 0.0 if self.max_abs == 0 else math.nan
        if self.ref_sq == 0:
            return math.inf if self.ref_peak == 0 else math.nan
        return math.sqrt(self.err_sq / self.ref_sq)

    @property
    def cosine(self) -> float:
        """Cosine similarity over the compared positions; NaN when nothing was compared."""
        if not self.compared:
            return math.nan
        a, b = math.sqrt(self.ref_sq), math.sqrt(self.cand_sq)
        if self.err_sq == 0 and self.max_abs > 0:
            return math.nan  # unequal, but too small to square even in float64
        if a * b == 0:
            return 1.0 if self.max_abs == 0 else 0.0  # equal (all zero), or one side zero
        # (a^2 + b^2 - err^2) / 2ab, arranged so the sums' rounding does not cancel
        return max(-1.0, min(1.0, 1.0 - (self.err_sq - (a - b) ** 2) / (2 * a * b)))

    @property
    def sqnr_db(self) -> float:
        """``10 log10(||fp32||^2 / ||half - fp32||^2)``; NaN when nothing was compared."""
        if not self.compared:
            return math.nan
        if self.err_sq == 0:
            return math.inf if self.max_abs == 0 else math.nan
        if self.ref_sq == 0:
            return -math.inf if self.ref_peak == 0 else math.nan
        return 10 * math.log10(self.ref_sq / self.err_sq)

    @property
    def mean_abs(self) -> float:
        return self.sum_abs / self.compared if self.compared else math.nan

    @property
    def max_rel(self) -> float:
        """Largest absolute error relative to the reference's largest magnitude."""
        if not self.compared:
            return math.nan
        if self.ref_peak > 0:
            return self.max_abs / self.ref_peak
        return 0.0 if self.max_abs == 0 else math.inf

    def merge(self, other: ErrorStats) -> None:
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_abs = max(self.max_abs, other.max_abs)
        self.ref_peak = max(self.ref_peak, other.ref_peak)

    def add(self, reference: Any, candidate: Any, limits: NumericRange | None = None) -> bool:
        """Add one call's floating outputs; False when their structures do not match."""
        ref, cand = flatten(reference), flatten(candidate)
        matched = True
        for path, r in ref.items():
            if not (r.is_floating_point() or r.is_complex()):
                continue
            c = cand.get(path)
            if c is None or c.shape != r.shape or not (c.is_floating_point() or c.is_complex()):
                matched = False
                continue
            self.add_tensor(r, c, limits)
        return matched

    def add_tensor(
        self, reference: torch.Tensor, candidate: torch.Tensor, limits: NumericRange | None = None
    ) -> None:
        """Add one pair of tensors of the same shape. ``limits``: also count the reference
        values beyond the half dtype's range. Every reduction is computed where the tensors
        are and read back in one transfer (:func:`_read`); a second pass, in float64 with
        the non-finite positions masked, runs only where the first found inf/NaN or sums
        that may have underflowed."""
        r, c = aligned(reference, candidate)
        if r.is_complex() or c.is_complex():
            r, c = as_real(r.to(torch.complex128)), as_real(c.to(torch.complex128))
        elif r.dtype not in (torch.float32, torch.float64):
            r = r.float()
        c = c.to(r.dtype)
        self.elements += r.numel()
        got = _Pass.of(r, c, limits, masked=False) if r.numel() else _Pass.empty()
        if not (got.finite() and got.exact_enough(r)):  # see the module doc
            got = _Pass.of(r.to(torch.float64), c.to(torch.float64), limits, masked=True)
        self.compared += got.compared
        self.nonfinite += got.nonfinite
        self.reference_nonfinite += got.reference_nonfinite
        self.ref_sq += got.ref_sq
        self.cand_sq += got.cand_sq
        self.err_sq += got.err_sq
        self.sum_abs += got.sum_abs
        self.max_abs = max(self.max_abs, got.max_abs)
        self.ref_peak = max(self.ref_peak, got.ref_peak)
        if limits is not None and got.ref_peak > limits.max:
            self.beyond_range += got.beyond_range
        self.zeroed += got.flushed
        if got.err_sq > 1e-4 * got.ref_sq:  # only count flushed values where error shows
            self.flushed += got.flushed


def _read(values: list[torch.Tensor]) -> list[float]:
    """Scalars computed on the device, read to the host in one transfer (one copy, the
    only sync; on the CPU too, so that the syncs counted in tests are the ones a GPU
    makes)."""
    stacked = torch.stack([v.to(torch.float64) for v in values])
    return stacked.to("cpu", copy=True).tolist()  # type: ignore[no-any-return]


def _square(norm: torch.Tensor) -> torch.Tensor:
    """A norm squared in float64, where an fp32 norm's square does not overflow."""
    return norm.to(torch.float64) ** 2


def _peak_of(t: torch.Tensor) -> torch.Tensor:
    """Largest magnitude, on the device (aminmax is several times faster than an
    inf-norm on CPU)."""
    low, high = torch.aminmax(t)
    return torch.maximum(-low, high)


_TINY = 2.0**-100  # fp32 squares below 2**-126 underflow; see _Sums.exact_enough


@dataclass(frozen=True)
class _Pass:
    """One pair's sums and counts, from one read. ``masked=False``: the fast pass, in the
    reference's dtype over every position (its sums are not finite where any value is
    not); ``masked=True``: non-finite positions matched and left out of the sums."""

    ref_sq: float
    cand_sq: float
    err_sq: float
    sum_abs: float
    max_abs: float
    ref_peak: float
    compared: int
    nonfinite: int = 0
    reference_nonfinite: int = 0
    beyond_range: int = 0
    flushed: int = 0
    ref_any: bool = True
    cand_any: bool = True

    @classmethod
    def empty(cls) -> _Pass:
        return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, ref_any=False, cand_any=False)

    @classmethod
    def of(
        cls, r: torch.Tensor, c: torch.Tensor, limits: NumericRange | None, *, masked: bool
    ) -> _Pass:
        zero = torch.zeros((), dtype=r.dtype, device=r.device)
        counts: list[torch.Tensor] = []
        ref_ok = torch.isfinite(r)
        if masked:
            cand_ok = torch.isfinite(c)
            same = (torch.isnan(r) & torch.isnan(c)) | (r == c)  # both NaN, or equal infs
            both = ref_ok & cand_ok
            counts = [both.sum(), ((ref_ok & ~cand_ok) | (~ref_ok & ~same)).sum(), (~ref_ok).sum()]
            finite_ref = torch.where(ref_ok, r, zero)
            r, c = torch.where(both, r, zero), torch.where(both, c, zero)
        else:
            finite_ref = r
        diff = r - c
        beyond = finite_ref.abs() > limits.max if limits is not None else zero.bool()
        values = _read(
            [
                _square(torch.linalg.vector_norm(r)),
                _square(torch.linalg.vector_norm(c)),
                _square(torch.linalg.vector_norm(diff)),
                diff.abs().sum(),
                _peak_of(diff),
                _peak_of(finite_ref) if r.numel() else zero,
                beyond.sum(),
                ((c == 0) & (r != 0)).sum(),
                r.any(),
                c.any(),
                *counts,
            ]
        )
        ref_sq, cand_sq, err_sq, sum_abs, max_abs, peak, over, flushed, r_any, c_any = values[:10]
        compared, nonfinite, ref_nonfinite = (
            (int(v) for v in values[10:]) if masked else (r.numel(), 0, 0)
        )
        return cls(
            ref_sq,
            cand_sq,
            err_sq,
            sum_abs,
            max_abs,
            peak,
            compared,
            nonfinite,
            ref_nonfinite,
            int(over),
            int(flushed),
            bool(r_any),
            bool(c_any),
        )

    def finite(self) -> bool:
        sums = (self.ref_sq, self.cand_sq, self.err_sq, self.sum_abs, self.max_abs, self.ref_peak)
        return all(math.isfinite(v) for v in sums)

    def exact_enough(self, r: torch.Tensor) -> bool:
        """False when a sum may have lost values to underflow: a sum of n squares of at
        least ``n * _TINY`` lost less than 2**-26 of itself; a smaller one is trusted only
        when its tensor is all zero."""
        if r.dtype == torch.float64:
            return True  # already the widest; see the module doc
        low = r.numel() * _TINY
        return (
            (self.ref_sq >= low or not self.ref_any)
            and (self.cand_sq >= low or not self.cand_any)
            and (self.err_sq >= low or self.max_abs == 0)
        )
