"""Autocast inside ``forward``, with an explicit dtype, for ``nn.DataParallel``.

Autocast state is per thread. ``nn.DataParallel`` runs each replica in its own thread
through ``torch.nn.parallel.parallel_apply``, which re-enters autocast there with only
``enabled=...``: the replicas then compute in the device's *default* autocast dtype (fp16
on CUDA, bf16 on CPU), not the one the caller asked for. Wrapping the model with
:func:`autocast_forward` enters autocast with the device type and dtype inside
``forward``, in whatever thread runs it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from halfprec.dtypes import DTypeLike, dtype_name, parse_dtype
from halfprec.tree import iter_tensors


class AutocastForward(nn.Module):
    """Runs ``module.forward`` under ``torch.autocast(device_type, dtype)``.

    ``device_type=None`` takes the device type of the first tensor argument (or of the
    module's first parameter), so one wrapper is right on every device DataParallel uses.
    The wrapped model is ``self.module``; its state_dict keys gain the prefix ``module.``,
    as with DataParallel itself.
    """

    def __init__(self, module: nn.Module, dtype: torch.dtype, device_type: str | None) -> None:
        super().__init__()
        self.module = module
        self.dtype = dtype
        self.device_type = device_type

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        device_type = self.device_type or self._infer_device_type(args, kwargs)
        with torch.autocast(device_type, dtype=self.dtype):
            return self.module(*args, **kwargs)

    def _infer_device_type(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        for _, tensor in iter_tensors((args, kwargs)):
            return tensor.device.type
        for param in self.module.parameters():
            return param.device.type
        return "cpu"

    def extra_repr(self) -> str:
        return f"dtype={dtype_name(self.dtype)}, device_type={self.device_type or 'from inputs'}"


def autocast_forward(
    module: nn.Module, dtype: DTypeLike, *, device_type: str | None = None
) -> AutocastForward:
    """Wrap ``module`` so its forward always runs under autocast in ``dtype``.

    Use it before ``nn.DataParallel``: ``nn.DataParallel(autocast_forward(model, "fp16"))``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"autocast_forward() takes an nn.Module, got {type(module).__name__}; "
            "wrap the model, e.g. autocast_forward(model, 'bf16')"
        )
    return AutocastForward(module, parse_dtype(dtype), device_type)
