"""Module boundaries of a converted model: where dtypes meet, tensors are cast.

Three behaviours (see :mod:`halfprec.convert.swap`), each a plain mixin with frozen
settings, so the converted model stays an ordinary module:

- :class:`RootCast`: the root casts floating inputs to the compute dtype and floating
  outputs back to the original dtype; it also carries the model's resolved recipe;
- :class:`Guard`: a half module that owns parameters casts a stray floating input (an fp32
  ``torch.zeros`` made in a caller's ``forward``) to its own dtype;
- :class:`Fp32Island`: an fp32 island receives fp32 and hands its caller back the caller's
  dtype. A built-in norm whose kernel takes half input with fp32 parameters (probed once
  per device and dtype) needs no casts at all. An island that is not a default norm
  island keeps an output fp32 where the caller's dtype cannot hold it (eager on the CPU
  only: a compiled, exported or CUDA-graph-captured graph cannot branch on values, and on
  a GPU each check would be a device-to-host sync per forward, so there it is cast back;
  name the island in ``fp32_outputs`` to keep its outputs fp32 everywhere). An island
  named in the recipe's ``fp32_outputs`` hands every output on in fp32 (``handoff``): the
  next half module or GEMM that consumes it casts it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from halfprec.convert.op_policy import Fp32OpsMode, LeafSettings, is_default_policy, run_leaf
from halfprec.convert.swap import Behaviour, values_readable
from halfprec.dtypes import cast_floating, dtype_name, fits_in, range_of
from halfprec.tree import iter_tensors, map_tensors


def _first_float_dtype(obj: Any) -> torch.dtype | None:
    for _, t in iter_tensors(obj):
        if t.is_floating_point():
            return t.dtype
    return None


def _keeps_wide(t: torch.Tensor, caller: torch.dtype) -> bool:
    """Whether an island's fp32 output stays fp32 because ``caller``'s dtype cannot hold
    it (:func:`~halfprec.dtypes.fits_in`); where its values cannot be read
    (:func:`~halfprec.convert.swap.values_readable`) it is cast back, as in a compiled
    graph."""
    return values_readable(t) and not fits_in(t, caller)


@dataclass(frozen=True)
class RootSettings:
    """The root of a converted model: its compute and original dtypes, whether it casts
    inputs (not when the whole model is an fp32 island) and outputs, and what the
    conversion decided (``recipe``: the resolved :class:`~halfprec.convert.recipe.Recipe`;
    ``reason``: why this dtype; ``attributes_cast``; ``notes``)."""

    dtype: torch.dtype
    original: torch.dtype
    cast_inputs: bool
    cast_outputs: bool
    recipe: Any  # a Recipe (typed loosely: recipe.py sits above this module)
    fp32_ops: frozenset[str] = frozenset()
    fp32_inputs: bool = False
    reason: str = ""
    # islands hand outputs on in fp32 (Recipe.fp32_outputs): GEMMs must cast what they meet
    handoffs: bool = False
    attributes_cast: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


class RootCast(Behaviour):
    attr = "_halfprec_root"

    @classmethod
    def label(cls, settings: RootSettings) -> str:
        ops = len(settings.fp32_ops)
        policy = (
            "autocast fp32 ops"
            if is_default_policy(settings.fp32_ops)
            else f"{ops} fp32 op{'s' if ops != 1 else ''}"
        )
        small = getattr(settings.recipe, "fp32_params_up_to", 0)
        params = f", fp32 params <= {small}" if small else ""
        return f"halfprec {dtype_name(settings.dtype)}" + (f", {policy}" if ops else "") + params

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        s: RootSettings = getattr(self, RootCast.attr)
        if s.cast_inputs and not s.fp32_inputs:
            to_half = cast_floating(s.dtype)
            args, kwargs = map_tensors(to_half, args), map_tensors(to_half, kwargs)
        if s.cast_inputs and (s.fp32_ops or s.fp32_inputs or s.handoffs):
            with Fp32OpsMode(s.dtype, s.fp32_ops):
                out = super().forward(*args, **kwargs)  # type: ignore[misc]
        else:
            out = super().forward(*args, **kwargs)  # type: ignore[misc]
        if not (s.cast_inputs and s.cast_outputs):
            return out
        dtype, original = s.dtype, s.original

        def back(t: torch.Tensor) -> torch.Tensor:
            return t.to(original) if t.dtype == dtype else t

        return map_tensors(back, out)


@dataclass(frozen=True)
class GuardSettings:
    """``dtype``: the module's own. ``leaf``: where the module is a built-in leaf with no
    other behaviour, the torch calls its ``forward`` makes (:data:`~halfprec.convert.
    op_policy.LEAF_CALLS`), so it can run with the op policy's mode set aside."""

    dtype: torch.dtype
    leaf: LeafSettings | None = None


class Guard(Behaviour):
    """Casts stray floating positional inputs to the module's own dtype."""

    attr = "_halfprec_guard"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        s: GuardSettings = getattr(self, Guard.attr)
        dtype, leaf = s.dtype, s.leaf
        # read with torch functions off: under the op policy's mode each tensor attribute
        # would be a Python call, twice per input of every half module
        with torch._C.DisableTorchFunction():
            stray = [
                isinstance(a, torch.Tensor) and a.dtype != dtype and a.is_floating_point()
                for a in args
            ]
            # a GEMM leaf called positionally: after the casts below its floating operands
            # are its inputs and its parameters, one dtype if those have the module's
            one = leaf is not None and leaf.gemm and not kwargs and _params_have(self, dtype)  # type: ignore[arg-type]
        if any(stray):
            args = tuple(a.to(dtype) if s else a for a, s in zip(args, stray, strict=True))
        if leaf is not None and not torch.compiler.is_compiling():  # compiled: traced away
            return run_leaf(super().forward, leaf.calls, one, args, kwargs)  # type: ignore[misc]
        return super().forward(*args, **kwargs)  # type: ignore[misc]


def _params_have(module: nn.Module, dtype: torch.dtype) -> bool:
    """True when every floating parameter of ``module`` itself has ``dtype``."""
    for p in module._parameters.values():
        if p is not None and p.dtype != dtype and p.dtype.is_floating_point:
            return False
    return True


@dataclass(frozen=True)
class IslandSettings:
    """An fp32 island: ``original`` (fp32) in, the caller's dtype out. ``cast=False``: a
    built-in norm whose kernel does this by itself. ``widen``: keep an output beyond the
    caller's range in fp32. ``reason``: why the module is an island. ``handoff``: hand
    every output on in fp32 (``Recipe.fp32_outputs``)."""

    original: torch.dtype
    compute: torch.dtype
    cast: bool
    widen: bool
    reason: str
    handoff: bool = False


class Fp32Island(Behaviour):
    attr = "_halfprec_island"

    @classmethod
    def label(cls, settings: IslandSettings) -> str:
        return "fp32 island, fp32 output" if settings.handoff else "fp32 island"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        s: IslandSettings = getattr(self, Fp32Island.attr)
        if not s.cast:
            return super().forward(*args, **kwargs)  # type: ignore[misc]
        caller = _first_float_dtype((args, kwargs))
        to_wide = cast_floating(s.original)
        out = super().forward(*map_tensors(to_wide, args), **map_tensors(to_wide, kwargs))  # type: ignore[misc]
        if caller is None or caller == s.original or s.handoff:
            return out
        # the range check is for islands that widen only (not the default norm islands):
        # the others read no dtype facts per call
        narrow = s.widen and range_of(caller).max < range_of(s.original).max / 2  # fp16
        original = s.original

        def back(t: torch.Tensor) -> torch.Tensor:
            if t.dtype != original or (narrow and _keeps_wide(t, caller)):
                return t
            return t.to(caller)

        return map_tensors(back, out)


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


def mixed_kernel_ok(
    module: nn.Module, original: torch.dtype, compute: torch.dtype, allow_mixed: bool
) -> bool:
    """True when ``module`` (a built-in norm) computes half input against its fp32
    parameters exactly as an island would, so it needs no casts."""
    kind = type(module)
    if not (allow_mixed and kind in _MIXED_KERNELS and original == torch.float32):
        return False
    params = list(module.parameters(recurse=False))
    device = params[0].device if params and not params[0].is_meta else torch.device("cpu")
    return _mixed_kernel_ok(kind.__name__, device, compute)
