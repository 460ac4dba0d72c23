"""``fp32``: the caller's model as it is, the reference every other way is timed against."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from halfprec.bench.ways.base import Way
from halfprec.convert.recipe import Recipe


class Fp32(Way):
    name = "fp32"
    summary = "the model as it is (bench's reference; fp32 precision IEEE while timed)"
    dtypes = (torch.float32,)
    choosable = True
    bench_default = True
    saving = "the caller's own model: halfprec.save(model, path) or torch's state_dict"

    def build(self, model: nn.Module, dtype: torch.dtype, recipe: Recipe, batch: Any) -> nn.Module:
        return model

    def refuse_dtype(self, dtype: torch.dtype) -> str:
        return "the fp32 variant runs in torch.float32"
