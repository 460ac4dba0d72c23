"""Naming the parameter whose gradient went inf/NaN first, for the skipped-step watchdog.

Gradients flow from the loss backwards, so the first parameter (in backward order) with a
non-finite gradient sits where the overflow started; every parameter upstream of it gets
inf/NaN only because of it. :class:`GradientWatch` records that order with
post-accumulate-grad hooks on the models passed to ``MixedPrecision.watch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from halfprec.errors import HalfprecError

__all__ = ["GradientWatch", "NonFinite", "TrainingDivergedError", "unwrap"]


class TrainingDivergedError(HalfprecError, RuntimeError):
    """Too many optimizer steps in a row were skipped for inf/NaN gradients."""


@dataclass(frozen=True)
class NonFinite:
    """The non-finite gradients of one skipped step, first in backward order first."""

    names: tuple[str, ...]
    total: int

    def describe(self) -> str:
        if not self.names:
            return "no parameter gradient was inf/NaN (the total norm overflowed)"
        shown = ", ".join(self.names[:3])
        more = f" and {self.total - 3} more" if self.total > 3 else ""
        return f"{self.names[0]} first (inf/NaN gradients: {shown}{more})"


class GradientWatch:
    """Parameter names and the order in which their gradients arrived in the last backward."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._order: dict[int, int] = {}

    def add(self, model: nn.Module) -> None:
        inner = unwrap(model)
        for qualname, param in inner.named_parameters():
            if id(param) in self._names:
                continue
            owner = qualname.rpartition(".")[0]
            module = inner.get_submodule(owner) if owner else inner
            label = f"{qualname} (in {owner or 'the model'}: {type(module).__name__})"
            self._names[id(param)] = label
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._arrived)

    def _arrived(self, param: torch.Tensor) -> None:
        self._order.setdefault(id(param), len(self._order))

    def reset(self) -> None:
        self._order.clear()

    @property
    def watching(self) -> bool:
        return bool(self._names)

    def find(self, optimizers: Sequence[torch.optim.Optimizer]) -> NonFinite:
        """Parameters of ``optimizers`` with inf/NaN gradients, first in backward order first."""
        bad: list[tuple[int, str]] = []
        for opt_index, optimizer in enumerate(optimizers):
            for group_index, group in enumerate(optimizer.param_groups):
                for index, param in enumerate(group["params"]):
                    grad = param.grad
                    if grad is None or bool(torch.isfinite(_local(grad)).all()):
                        continue
                    fallback = (
                        f"optimizer {opt_index} param_groups[{group_index}].params[{index}] "
                        f"(shape {tuple(param.shape)})"
                    )
                    name = self._names.get(id(param), fallback)
                    bad.append((self._order.get(id(param), len(self._order) + len(bad)), name))
        bad.sort()
        return NonFinite(names=tuple(name for _, name in bad), total=len(bad))


def unwrap(model: nn.Module) -> nn.Module:
    """The user's model inside DataParallel, DistributedDataParallel or AutocastForward."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    from halfprec.train.parallel import AutocastForward

    while isinstance(model, (DataParallel, DistributedDataParallel, AutocastForward)):
        model = model.module
    return model


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor gradient (FSDP2), or the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor
