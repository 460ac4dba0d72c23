"""Naming the parameter whose gradient went inf/NaN first, for the skipped-step watchdog.

Gradients flow from the loss backwards, so the first parameter (in backward order) with a
non-finite gradient sits where the overflow started; every parameter upstream of it gets
inf/NaN only because of it. :class:`GradientWatch` records that order with
post-accumulate-grad hooks on the models passed to ``MixedPrecision.watch``.

The first bad gradient in backward order sits *after* the module that overflowed: an inf
made in block 3's MLP reaches the loss through the final norm, whose weight gets the first
NaN gradient. So the watch also records, with forward hooks, the first module (in the order
forward calls finished) whose output held inf/NaN: that is where the overflow happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from halfprec.dtypes import dtype_name
from halfprec.errors import HalfprecError

__all__ = ["GradientWatch", "NonFinite", "TrainingDivergedError", "diverged", "unwrap"]


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
    """Parameter names and the order in which their gradients arrived in the last backward;
    with ``activations``, also which module outputs held inf/NaN since the last reset."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._order: dict[int, int] = {}
        self._handles: list[RemovableHandle] = []
        self._outputs: dict[str, torch.Tensor] = {}  # module -> any inf/NaN, in finish order

    def add(self, model: nn.Module, activations: bool = False) -> None:
        inner = unwrap(model)
        for qualname, param in inner.named_parameters():
            if id(param) in self._names:
                continue
            owner = qualname.rpartition(".")[0]
            module = inner.get_submodule(owner) if owner else inner
            label = f"{qualname} (in {owner or 'the model'}: {type(module).__name__})"
            self._names[id(param)] = label
            if param.requires_grad:
                self._handles.append(param.register_post_accumulate_grad_hook(self._arrived))
        if activations:
            for name, module in inner.named_modules():
                label = f"{name or 'the model'} ({type(module).__name__})"
                self._handles.append(module.register_forward_hook(self._output_hook(label)))

    def remove(self) -> None:
        """Take every hook this watch put on the models off again, and forget the names."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._names.clear()
        self.reset()

    def _arrived(self, param: torch.Tensor) -> None:
        self._order.setdefault(id(param), len(self._order))

    def _output_hook(self, label: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if torch.is_grad_enabled() or module.training:  # training forwards only
                bad = _any_non_finite(output)
                if bad is not None:
                    seen = self._outputs.get(label)
                    self._outputs[label] = bad if seen is None else seen | bad

        return hook

    def first_activation(self) -> str | None:
        """The first module (in the order forwards finished) whose output held inf/NaN
        since the last reset; None if none did or activations are not watched."""
        for label, bad in self._outputs.items():
            if bool(bad):
                return label
        return None

    def reset(self) -> None:
        self._order.clear()
        self._outputs.clear()

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


def diverged(
    skips: int,
    scale: float | None,
    gradients: NonFinite,
    activation: str | None,
    dtype: torch.dtype | None,
    hint: str = "",
) -> TrainingDivergedError:
    """The watchdog's error after ``skips`` skipped steps in a row: where the inf/NaN
    started, and fixes that fit the run (no "train in bf16" to a bf16 run)."""
    scale_text = f" (loss scale now {scale:g})" if scale is not None else ""
    where = f"; first inf/NaN activation: {activation}" if activation else ""
    fixes = "keep that module in fp32, lower the learning rate"
    if dtype is None or dtype == torch.float16:
        fixes += ", or train in bf16"
    elif dtype == torch.bfloat16:
        fixes += ", or look for an input or loss that is inf/NaN (bf16 has fp32's range)"
    run = f" in this {dtype_name(dtype)} run" if dtype is not None else ""
    return TrainingDivergedError(
        f"{skips} optimizer steps in a row were skipped for inf/NaN gradients{run}"
        f"{scale_text}; first inf/NaN gradient in the first skipped step: "
        f"{gradients.describe()}{where}{hint}. Fix the overflow there: {fixes}"
    )


def _any_non_finite(output: Any) -> torch.Tensor | None:
    """A 0-d bool tensor: does any floating tensor in ``output`` hold inf/NaN (no sync)."""
    tensors = output if isinstance(output, (tuple, list)) else (output,)
    flags = [
        ~torch.isfinite(t).all()
        for t in tensors
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()
    ]
    if not flags:
        return None
    return torch.stack(flags).any() if len(flags) > 1 else flags[0]


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
