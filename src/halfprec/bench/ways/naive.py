"""``naive``: ``model.to(dtype)``, with the caller's floating inputs cast to match."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from halfprec.bench.ways.base import Way
from halfprec.convert.recipe import Recipe
from halfprec.dtypes import HALF_DTYPES
from halfprec.tree import map_tensors


class _CastInputs:
    """The naive recipe's caller: a pre-hook casting floating inputs to ``dtype``."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def _cast(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.dtype) if t.is_floating_point() else t

    def __call__(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, Any]:
        return map_tensors(self._cast, args), map_tensors(self._cast, kwargs)


class Naive(Way):
    name = "naive"
    summary = "model.to(dtype), floating inputs cast to it: what halfprec is measured against"
    dtypes = HALF_DTYPES
    bench_default = True
    saving = "its state_dict (all half weights); the input cast is not saved"

    def build(self, model: nn.Module, dtype: torch.dtype, recipe: Recipe, batch: Any) -> nn.Module:
        built = model.to(dtype)
        built.register_forward_pre_hook(_CastInputs(dtype), with_kwargs=True)
        return built
