"""``halfprec``: :func:`halfprec.convert` with the recipe's fp32 islands, in the variant's
dtype."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from halfprec.bench.ways.base import Way
from halfprec.convert.core import convert_
from halfprec.convert.recipe import Recipe
from halfprec.dtypes import HALF_DTYPES


class Converted(Way):
    name = "halfprec"
    summary = "halfprec.convert with the recipe's fp32 islands (a tuned recipe's, if given)"
    dtypes = HALF_DTYPES
    choosable = True
    bench_default = True
    saving = "halfprec.save(model, path): safetensors with the recipe, loaded by halfprec.load"

    def build(self, model: nn.Module, dtype: torch.dtype, recipe: Recipe, batch: Any) -> nn.Module:
        return convert_(model, recipe.replace(dtype=dtype))
