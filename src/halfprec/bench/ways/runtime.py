"""The ways run by another runtime (OpenVINO, onnxruntime): the fp32 model compiled by
that runtime (:mod:`halfprec.runtimes`), traced on an example batch."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from halfprec.bench.ways.base import Way
from halfprec.convert.recipe import Recipe
from halfprec.dtypes import dtype_name
from halfprec.runtimes import build_runtime, runtime_dtypes, unavailable


class RuntimeWay(Way):
    """A runtime of :mod:`halfprec.runtimes` by its name there (``runs_in``)."""

    needs_batch = True
    compilable = False
    saving = "RuntimeModule.save(path): the runtime's own graph file (.xml, .onnx)"

    def build(self, model: nn.Module, dtype: torch.dtype, recipe: Recipe, batch: Any) -> nn.Module:
        return build_runtime(model, self.runs_in, dtype, batch)

    def unavailable(self, dtype: torch.dtype, device: torch.device | str) -> str | None:
        return unavailable(self.runs_in, dtype, device)

    def refuse_dtype(self, dtype: torch.dtype) -> str:
        offered = runtime_dtypes(self.runs_in)
        return (
            f"{self.name}-{dtype_name(dtype)} is not offered: {self.name} runs "
            f"{', '.join(map(dtype_name, offered))} here (onnxruntime's CPU provider has no "
            f"half kernels for most ops); use {self.name}-{dtype_name(offered[0])}"
        )
