"""A stand-in for a second device on a CPU-only machine.

:class:`Remote` wraps a CPU tensor and reports ``device="cuda"``. Like a real CUDA tensor,
it refuses to meet a CPU tensor in one op ("Expected all tensors to be on the same
device"), and ``.cpu()``/``.to("cpu")`` copies it to the host. So code that subtracts a
GPU reference from CPU-computed outputs fails here the way it fails on a GPU host, and
code that brings the pair onto one device passes. (A CPU tensor cannot be sent *to* it:
``.to("cuda")`` asks the CPU-only torch build for CUDA first.)"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

__all__ = ["Remote"]

_aten = torch.ops.aten
_CUDA = torch.device("cuda")


def _unwrap(x: Any) -> Any:
    return x.inner if isinstance(x, Remote) else x


def _wrap(x: Any) -> Any:
    return Remote(x) if isinstance(x, torch.Tensor) and not isinstance(x, Remote) else x


class Remote(torch.Tensor):
    """A tensor that lives "on the GPU": its values are a CPU tensor, ``inner``."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Remote:
        t = torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, strides=inner.stride(), dtype=inner.dtype, device=_CUDA
        )
        t.inner = inner
        return t  # type: ignore[no-any-return]

    def __repr__(self) -> str:  # type: ignore[override]
        return f"Remote({self.inner!r})"

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if func is _aten._to_copy.default and device is not None and device.type == "cpu":
            rest = {k: v for k, v in kwargs.items() if k != "device"}
            return func(_unwrap(args[0]), **rest)
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(not isinstance(t, Remote) and t.dim() > 0 for t in tensors):
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                "devices, cuda:0 and cpu!"
            )
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        return tree_map(_wrap, out)
