"""Do the inputs alone break the tolerance? The fp32 model run on its inputs rounded to the
half dtype and back.

When a model's input values cannot be carried by the half dtype (coordinates near 40 in
bf16 have a step of 0.25, a waveform's fine detail in fp16), no island can recover them
once they are rounded: the fix is to keep those inputs, and the modules that first take
them, in fp32. :func:`input_rounding` measures exactly that, with the model itself in fp32,
so nothing else the half model does can be blamed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from halfprec.batch import call
from halfprec.compare import Comparison, compare_outputs
from halfprec.dtypes import dtype_name
from halfprec.fp32 import exact_fp32
from halfprec.tolerance import Tolerance
from halfprec.tree import iter_tensors, map_tensors


def _rounded(dtype: torch.dtype) -> Any:
    def rnd(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point() or t.dtype == dtype:
            return t
        return t.to(dtype).to(t.dtype)

    return rnd


def _changed(batch: Any, rounded: Any) -> bool:
    return any(
        a.is_floating_point() and not torch.equal(a, b)
        for (_, a), (_, b) in zip(iter_tensors(batch), iter_tensors(rounded), strict=True)
    )


def input_rounding(
    model: nn.Module,
    batches: list[Any],
    reference_outputs: list[Any],
    dtype: torch.dtype,
    tolerance: Tolerance,
) -> Comparison | None:
    """The fp32 ``model`` on ``batches`` with every floating input rounded to ``dtype``,
    compared with ``reference_outputs`` (its outputs on the batches as given).

    ``None`` when rounding leaves every input unchanged (no floating inputs, or values the
    dtype holds exactly). ``model`` is not changed; its train/eval mode is used as is.
    """
    rnd = _rounded(dtype)
    rounded = [map_tensors(rnd, b) for b in batches]
    if not any(_changed(b, r) for b, r in zip(batches, rounded, strict=True)):
        return None
    with torch.no_grad(), exact_fp32():
        outs = [call(model, r) for r in rounded]
    return compare_outputs(reference_outputs, outs, tolerance=tolerance, dtype=dtype)


def input_rounding_note(result: Comparison | None) -> str | None:
    """The one-line finding when rounding the inputs alone fails the tolerance, else None."""
    if result is None or result.passed:
        return None
    name = dtype_name(result.dtype) if result.dtype is not None else "half"
    return (
        f"input rounding alone breaks the tolerance: the fp32 model on its inputs rounded "
        f"to {name} fails ({result.reason}); no half module can recover those values, so "
        f"keep the inputs fp32 (Recipe(fp32_inputs=True), the default) and the modules that "
        f"first take them fp32 (--keep-fp32 NAME)"
    )
