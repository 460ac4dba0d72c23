"""Module boundaries of a converted model: the hooks that cast tensors where dtypes meet.

- the root casts floating inputs to the compute dtype and floating outputs back;
- every half module that owns parameters casts a stray floating input to its own dtype;
- an fp32 island receives fp32 and hands its caller back the caller's dtype, either through
  hooks or, for built-in norms whose kernels take half input with fp32 parameters (probed
  once per device and dtype), with no hooks at all. An island that is not a default norm
  island keeps an output fp32 where the caller's dtype cannot hold it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from halfprec.dtypes import range_of
from halfprec.tree import map_tensors

__all__ = [
    "cast_inputs_hook",
    "cast_outputs_hook",
    "guard_hook",
    "install_island",
]


def _to(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t

    return cast


def cast_inputs_hook(dtype: torch.dtype) -> Callable[..., Any]:
    cast = _to(dtype)

    def hook(
        module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return map_tensors(cast, args), map_tensors(cast, kwargs)

    return hook


def cast_outputs_hook(dtype: torch.dtype, original: torch.dtype) -> Callable[..., Any]:
    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(original) if t.dtype == dtype else t

    def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        return map_tensors(cast, output)

    return hook


def guard_hook(dtype: torch.dtype) -> Callable[..., Any]:
    """Cheap pre-hook for half modules: cast stray floating tensors to the module's dtype."""

    def hook(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        for a in args:
            if isinstance(a, torch.Tensor) and a.dtype != dtype and a.is_floating_point():
                return tuple(
                    a.to(dtype)
                    if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != dtype
                    else a
                    for a in args
                )
        return None

    return hook


def _first_float_dtype(obj: Any) -> torch.dtype | None:
    found: list[torch.dtype] = []

    def see(t: torch.Tensor) -> torch.Tensor:
        if not found and t.is_floating_point():
            found.append(t.dtype)
        return t

    map_tensors(see, obj)
    return found[0] if found else None


def _probe_batch_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    mean, var = torch.zeros_like(w), torch.ones_like(w)
    return F.batch_norm(x, mean, var, w, w, training=False)


# Built-in norms whose kernels may take half input with fp32 parameters, computing in fp32
# internally (opmath) and returning half: exactly what an island computes, minus two casts.
_MIXED_KERNELS: dict[type[nn.Module], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    nn.LayerNorm: lambda x, w: F.layer_norm(x, (w.numel(),), w, w),
    nn.GroupNorm: lambda x, w: F.group_norm(x, 2, w, w),
    nn.BatchNorm1d: _probe_batch_norm,
    nn.BatchNorm2d: lambda x, w: _probe_batch_norm(x.unsqueeze(-1), w),
    nn.BatchNorm3d: lambda x, w: _probe_batch_norm(x[..., None, None], w),
}


@functools.lru_cache(maxsize=64)
def _mixed_kernel_ok(kind_name: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Probe once per (norm type, device, dtype): does half-in/fp32-params match fp32?"""
    kind = next(k for k in _MIXED_KERNELS if k.__name__ == kind_name)
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 4, 8, generator=gen) * 3).to(device)
    w = (torch.rand(4 if kind is not nn.LayerNorm else 8, generator=gen) + 0.5).to(device)
    if kind is nn.LayerNorm:
        x = x.reshape(12, 8)
    fn = _MIXED_KERNELS[kind]
    try:
        mixed = fn(x.to(dtype), w)
    except RuntimeError:
        return False
    if mixed.dtype != dtype:
        return False
    exact = fn(x.to(dtype).float(), w).to(dtype)
    return bool(torch.allclose(mixed.float(), exact.float(), rtol=0, atol=4 * range_of(dtype).eps))


def _tracing() -> bool:
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


def _beyond(t: torch.Tensor, limit: float) -> bool:
    return t.numel() > 0 and not _tracing() and bool(t.abs().amax() > limit)


def install_island(
    module: nn.Module,
    original: torch.dtype,
    compute: torch.dtype,
    allow_mixed: bool,
    *,
    widen: bool = False,
) -> None:
    """fp32 in, and the caller's dtype back out, per call (thread-safe for DataParallel).

    A built-in norm whose kernel computes half inputs in fp32 against fp32 parameters needs
    no hooks at all (probed once per device); any other island gets casting hooks. With
    ``widen``, an output beyond the caller's range stays fp32 rather than turning into inf
    (the value stays fp32 until a later island or the model's output; one max-abs reduction
    per output, skipped while tracing or compiling).
    """
    kind = type(module)
    params = list(module.parameters(recurse=False))
    device = params[0].device if params and not params[0].is_meta else torch.device("cpu")
    mixed = allow_mixed and kind in _MIXED_KERNELS and original == torch.float32
    if mixed and _mixed_kernel_ok(kind.__name__, device, compute):
        return
    local = threading.local()
    to_fp32 = _to(original)

    def pre(
        mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        stack = getattr(local, "stack", None)
        if stack is None:
            stack = local.stack = []
        stack.append(_first_float_dtype((args, kwargs)))
        return map_tensors(to_fp32, args), map_tensors(to_fp32, kwargs)

    def post(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
        caller = local.stack.pop()
        if caller is None or caller == original:
            return None

        limit = range_of(caller).max
        narrow = widen and limit < range_of(original).max / 2  # fp16, not bf16

        def back(t: torch.Tensor) -> torch.Tensor:
            if t.dtype != original or (narrow and _beyond(t, limit)):
                return t
            return t.to(caller)

        return map_tensors(back, output)

    module.register_forward_pre_hook(pre, with_kwargs=True)
    module.register_forward_hook(post, with_kwargs=True, always_call=True)
