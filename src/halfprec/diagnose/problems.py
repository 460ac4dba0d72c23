"""Why a module or the half run is broken, in words: the one place that turns error
statistics (:class:`~halfprec.errorstats.ErrorStats`) and a threshold into a reason, or
None when nothing is wrong."""

from __future__ import annotations

import torch

from halfprec.dtypes import dtype_name, range_of
from halfprec.errorstats import ErrorStats


def local_problem(
    stats: ErrorStats, exc: str | None, leak: str | None, threshold: float, dtype: torch.dtype
) -> str | None:
    """Why a module's own half computation (``stats``: its local error, ``exc``: what it
    raised, ``leak``: a dtype leak) is broken, or None."""
    name = dtype_name(dtype)
    if exc:
        return f"raises in {name}: {exc}"
    if stats.nonfinite:
        if stats.beyond_range:
            return (
                f"overflows: fp32 values reach {stats.ref_peak:.3g}, beyond the {name} max "
                f"{range_of(dtype).max:g}"
            )
        return f"makes inf/NaN in {name} (an intermediate value overflows or divides by 0)"
    if stats.rel_error > threshold:
        under = f"; {stats.flushed} results flushed to 0" if stats.flushed else ""
        return f"relative error {stats.rel_error:.3g} > {threshold:.3g}{under}"
    if leak:
        return f"dtype leak: {leak}"
    return None


def handed_problem(stats: ErrorStats, threshold: float, dtype: torch.dtype) -> str | None:
    """A module whose own code hands its callees broken inputs (then fixed by stand-ins)."""
    if stats.nonfinite or stats.rel_error > threshold:
        why = local_problem(stats, None, None, threshold, dtype)
        return f"hands its callees broken inputs: {why}"
    return None


def accumulated_problem(stats: ErrorStats, threshold: float, dtype: torch.dtype) -> str | None:
    """Why a module's output inside the full half run has gone wrong, or None."""
    if stats.nonfinite:
        return f"{stats.nonfinite} inf/NaN values in the {dtype_name(dtype)} run"
    if stats.rel_error > threshold:
        return f"accumulated relative error {stats.rel_error:.3g} > {threshold:.3g}"
    return None
