"""How halfprec calls a model with example inputs.

A *batch* is one call's inputs:

- a ``tuple`` is positional arguments: ``model(*batch)``;
- a ``dict`` is keyword arguments: ``model(**batch)``;
- an :class:`Args` holds both: ``model(*args.args, **args.kwargs)``;
- anything else (a tensor) is the single positional argument: ``model(batch)``.

A model that takes one dict positionally gets ``(the_dict,)``. Where a function accepts
"inputs", a ``list`` means several batches, anything else one batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.tree import ROOT, iter_tensors, map_tensors


@dataclass(frozen=True)
class Args:
    """Positional and keyword arguments of one call."""

    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


Batch = Any


def call(model: nn.Module, batch: Batch) -> Any:
    """Call ``model`` with one batch, following the convention above."""
    if isinstance(batch, Args):
        return model(*batch.args, **batch.kwargs)
    if isinstance(batch, tuple):
        return model(*batch)
    if isinstance(batch, dict):
        return model(**batch)
    return model(batch)


def describe(batch: Batch, limit: int = 4) -> str:
    """One batch's tensors as ``"x: float32[2, 5], mask: int64[2, 8]"`` (at most ``limit``)."""
    parts = (batch.args, batch.kwargs) if isinstance(batch, Args) else (batch,)
    items = [
        f"{'input' if path == ROOT else path}: {str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
        for part in parts
        for path, t in iter_tensors(part)
    ]
    more = f", and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more if items else "no tensors"


def as_batches(inputs: Any) -> list[Batch]:
    """A ``list`` is several batches; anything else is one."""
    if isinstance(inputs, list):
        if not inputs:
            raise ValueError("inputs is an empty list; give at least one batch")
        return inputs
    return [inputs]


def batch_size_of(batch: Batch) -> int:
    for _, t in iter_tensors(batch):
        if t.dim() >= 1:
            return int(t.shape[0])
    raise ValueError("the batch holds no tensor with a batch dimension; give tensor inputs")


def resize_batch(batch: Batch, size: int) -> Batch:
    """Repeat or cut every tensor that has the batch's leading size to ``size`` rows,
    keeping channels_last layouts."""
    base = batch_size_of(batch)
    if size == base:
        return batch

    def fit(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0 or t.shape[0] != base:
            return t
        reps = math.ceil(size / base)
        out = torch.cat([t] * reps)[:size] if reps > 1 else t[:size]
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
            return out.contiguous(memory_format=torch.channels_last)
        return out.contiguous()

    return map_tensors(fit, batch)
