"""Naming the parameter whose gradient went inf/NaN first, for the skipped-step watchdog.

Gradients flow from the loss backwards, so the first parameter (in backward order) with a
non-finite gradient sits where the overflow started; every parameter upstream of it gets
inf/NaN only because of it. :class:`GradientWatch` records that order with
post-accumulate-grad hooks on the models passed to ``MixedPrecision.watch``.

The first bad gradient in backward order sits *after* the module that overflowed: an inf
made in block 3's MLP reaches the loss through the final norm, whose weight gets the first
NaN gradient. So the watch also records, with forward hooks, the first module (in the order
forward calls finished) whose output held inf/NaN: that is where the overflow happened.

Both records are thread-safe and device-correct, as ``nn.DataParallel`` needs: its
replicas run forwards (and autograd its backward) in several threads at once, on several
devices. Each hook only appends to a list under a lock; flags from different devices are
moved to one device when a skipped step reads them, never combined where they were made.
A forward hook costs one reduction (``aminmax``) per module output and no host sync.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from halfprec.dtypes import dtype_name
from halfprec.errors import HalfprecError
from halfprec.train.grads import local_tensor


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
        self._alias: dict[int, int] = {}  # fp32 master -> the model parameter it stands for
        # (module, the (min, max) of one of its outputs), in the order forwards finished
        self._outputs: list[tuple[str, tuple[torch.Tensor, torch.Tensor]]] = []
        self._lock = threading.Lock()  # replica threads (DataParallel) record at once

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

    def alias(self, masters: dict[int, torch.Tensor]) -> None:
        """Name and order the optimizer's fp32 masters (keys: ``id(master)``) as the model
        parameters they stand for."""
        self._alias.update({key: id(param) for key, param in masters.items()})

    def remove(self) -> None:
        """Take every hook this watch put on the models off again, and forget the names."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._names.clear()
        self.reset()

    def _arrived(self, param: torch.Tensor) -> None:
        with self._lock:
            self._order.setdefault(id(param), len(self._order))

    def _output_hook(self, label: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if torch.is_grad_enabled() or module.training:  # training forwards only
                extremes = _extremes(output)
                if extremes:
                    with self._lock:
                        self._outputs.extend((label, pair) for pair in extremes)

        return hook

    def first_activation(self) -> str | None:
        """The first module (in the order forwards finished) whose output held inf/NaN
        since the last reset; None if none did or activations are not watched. Reads the
        device once."""
        with self._lock:
            recorded = list(self._outputs)
        if not recorded:
            return None
        device = recorded[0][1][0].device
        values = torch.stack([v.to(device, torch.float32) for _, pair in recorded for v in pair])
        bad = (~torch.isfinite(values)).view(-1, 2).any(dim=1)
        hits = bad.nonzero().flatten().tolist()
        return recorded[hits[0]][0] if hits else None

    def reset(self) -> None:
        with self._lock:
            self._order.clear()
            self._outputs.clear()

    @property
    def watching(self) -> bool:
        return bool(self._names)

    def find(self, optimizers: Sequence[torch.optim.Optimizer]) -> NonFinite:
        """Parameters of ``optimizers`` with inf/NaN gradients, first in backward order
        first. Reads the device once."""
        slots: list[tuple[torch.Tensor, str]] = []
        for opt_index, optimizer in enumerate(optimizers):
            for group_index, group in enumerate(optimizer.param_groups):
                for index, param in enumerate(group["params"]):
                    if param.grad is not None:
                        fallback = (
                            f"optimizer {opt_index} param_groups[{group_index}].params[{index}] "
                            f"(shape {tuple(param.shape)})"
                        )
                        key = self._alias.get(id(param), id(param))
                        slots.append((param, self._names.get(key, fallback)))
        if not slots:
            return NonFinite(names=(), total=0)
        device = local_tensor(slots[0][0].grad).device  # type: ignore[arg-type]
        flags = torch.stack(
            [~torch.isfinite(local_tensor(p.grad)).all().to(device) for p, _ in slots]  # type: ignore[arg-type]
        )
        bad: list[tuple[int, str]] = []
        for slot in flags.nonzero().flatten().tolist():
            param, name = slots[slot]
            key = self._alias.get(id(param), id(param))
            bad.append((self._order.get(key, len(self._order) + len(bad)), name))
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


def _extremes(output: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(min, max) of each floating tensor in ``output``: one reduction each, no sync.
    inf shows in one of them, and NaN in both (min and max propagate NaN)."""
    tensors = output if isinstance(output, (tuple, list)) else (output,)
    with torch.no_grad():  # no graph: the flags must not keep activations alive
        return [
            torch.aminmax(t)
            for t in tensors
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()
        ]


def unwrap(model: nn.Module) -> nn.Module:
    """The user's model inside DataParallel, DistributedDataParallel or AutocastForward."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    from halfprec.train.parallel import AutocastForward

    while isinstance(model, (DataParallel, DistributedDataParallel, AutocastForward)):
        model = model.module
    return model
