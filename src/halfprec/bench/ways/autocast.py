"""``autocast``: the fp32 model under ``torch.autocast``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from halfprec.bench.ways.base import Way
from halfprec.convert.recipe import Recipe
from halfprec.dtypes import HALF_DTYPES
from halfprec.modules import model_device


class _Autocast(nn.Module):
    """Runs the wrapped fp32 model under ``torch.autocast(device_type, dtype)``."""

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.model = model
        self.device_type = device_type
        self.dtype = dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.model(*args, **kwargs)


class Autocast(Way):
    name = "autocast"
    summary = "the fp32 model under torch.autocast(device, dtype)"
    dtypes = HALF_DTYPES
    bench_default = True
    saving = "the fp32 model's weights (.model); autocast is applied again where it runs"

    def build(self, model: nn.Module, dtype: torch.dtype, recipe: Recipe, batch: Any) -> nn.Module:
        return _Autocast(model, model_device(model).type, dtype)
