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

from dataclasses import dataclass, field
from typing import Any

from torch import nn

__all__ = ["Args", "Batch", "call", "as_batches"]


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


def as_batches(inputs: Any) -> list[Batch]:
    """A ``list`` is several batches; anything else is one."""
    if isinstance(inputs, list):
        if not inputs:
            raise ValueError("inputs is an empty list; give at least one batch")
        return inputs
    return [inputs]
