"""A tuned toy model with both per-call range checks, and a counter of host syncs.

:class:`HostSyncs` counts ``aten._local_scalar_dense``, the op every ``.item()``,
``bool()``, ``float()`` and ``int()`` of a tensor ends in: on a GPU, each one is a
device-to-host sync. It needs no CUDA. (Count under ``torch.no_grad``: under
``torch.inference_mode`` a dispatch mode does not see that op.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from halfprec import Recipe, convert
from halfprec.convert.op_islands import OpRef

__all__ = ["HostSyncs", "tuned_toy"]


class HostSyncs(TorchDispatchMode):
    """Counts the reads of device values by the host inside the ``with`` block: each op
    that copies one value out (``.item()``, ``float(t)``, ``bool(t)``) and each copy of a
    tensor to the CPU (``.cpu()``, ``.to("cpu", copy=True)``; on the CPU too, where a GPU
    would wait for it). ``tolist()`` of a CPU tensor reads memory the host has."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if (
            func is torch.ops.aten._local_scalar_dense.default
            or func is torch.ops.aten._to_copy.default
            and _to_cpu(kwargs.get("device"))
        ):
            self.count += 1
        return func(*args, **kwargs)


def _to_cpu(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cpu"


class Toy(nn.Module):
    """An fp32 island that widens (``island``, given a half input) and an op island
    (``exp``) whose fp32 result meets a half value: the two range checks a tuned forward
    makes on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.island = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return self.island(h) + torch.exp(h)


def tuned_toy(dtype: str = "fp16") -> nn.Module:
    """``Toy`` converted with ``island`` kept fp32 and the ``exp`` of its forward an op
    island, as ``tune`` would leave it."""
    recipe = Recipe(dtype, fp32_ops=(), fp32_inputs=False, fp32_params_up_to=0)
    ref = OpRef("", "exp", "tuned.py:1", 0, ordinal=0)
    recipe = replace(recipe, keep_fp32=("island",), op_islands=(ref,))
    return convert(Toy().eval(), recipe)
