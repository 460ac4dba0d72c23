"""What the diagnosis hooks record and how: one :class:`Call` per module call of the fp32
run, :class:`Snapshots` of the tensors it saw, :class:`hooked` to put hooks on every module
for one pass, and small tensor helpers."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from halfprec.modules import finite_peak
from halfprec.tree import iter_tensors


class Snapshots:
    """Copies of the tensors seen in one fp32 pass, one copy per tensor and version: a
    module's output that the next module takes as input is copied once, not twice."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[weakref.ref[torch.Tensor], int, torch.Tensor]] = {}

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        try:
            version = t._version
        except RuntimeError:  # inference tensors have no version counter: always copy
            return t.detach().clone()
        entry = self.seen.get(id(t))
        if entry is not None and entry[0]() is t and entry[1] == version:
            return entry[2]
        copy_ = t.detach().clone()
        self.seen[id(t)] = (weakref.ref(t), version, copy_)
        return copy_


def peak_of(obj: Any) -> float:
    """The largest finite magnitude among the floating tensors in ``obj``."""
    peak = 0.0
    for _, t in iter_tensors(obj):
        if t.is_floating_point():
            peak = max(peak, finite_peak(t))
    return peak


def float_dtypes(obj: Any) -> set[torch.dtype]:
    """The dtypes of the floating tensors in ``obj``."""
    return {t.dtype for _, t in iter_tensors(obj) if t.is_floating_point()}


class Call:
    """One call of one module in the fp32 run of one batch."""

    __slots__ = ("name", "nth", "end", "parent", "callees", "inputs", "output", "problem")

    def __init__(self, name: str, nth: int, parent: Call | None) -> None:
        self.name, self.nth, self.parent = name, nth, parent
        self.end = -1
        self.callees: list[Call] = []
        self.inputs: Any = None
        self.output: Any = None
        self.problem: str | None = None


def copy_to(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """A copy of every tensor, floating ones in ``dtype``."""

    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype, copy=True) if t.is_floating_point() else t.clone()

    return cast


class hooked:
    """Context manager: hooks on every module of ``model``, removed on exit."""

    def __init__(self, model: nn.Module, pre: Callable[..., Any], post: Callable[..., Any]):
        self.model, self.pre, self.post = model, pre, post
        self.handles: list[Any] = []

    def __enter__(self) -> None:
        for _, m in self.model.named_modules():
            self.handles.append(m.register_forward_pre_hook(self.pre, with_kwargs=True))
            self.handles.append(m.register_forward_hook(self.post, with_kwargs=True))

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()
