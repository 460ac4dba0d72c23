"""``MixedPrecisionCallback``: MixedPrecision's step checks inside a ``transformers.Trainer``.

Trainer (through Accelerate) runs autocast and, for fp16, a GradScaler; it does not skip a
bf16 or fp32 step whose gradients are inf/NaN, so one bad batch leaves every parameter
NaN. This callback gives Trainer users what :class:`halfprec.train.MixedPrecision` does in
a hand-written loop, with no change to their loop::

    trainer = Trainer(model, args, train_dataset=data, callbacks=[MixedPrecisionCallback()])

- **Step skipping.** Before each optimizer step it checks the total gradient norm (one
  all-reduced number under FSDP). If it is inf/NaN, every gradient is dropped, so the
  optimizer changes no parameter and no moment, and the learning-rate schedule does not
  advance. With fp16 the GradScaler skips the step itself; the callback only records it.
- **Report.** Each skipped step is kept in :attr:`skipped` (the step, the first inf/NaN
  gradient in backward order, the first inf/NaN activation in forward order) and logged.
- **Scale floor** (fp16): the loss scale stays within ``TrainConfig.min_scale`` and
  ``max_scale``.
- **Watchdog.** ``TrainConfig.max_consecutive_skips`` skipped steps in a row raise
  :class:`TrainingDivergedError` naming where the inf/NaN started.

Hooks that record gradient and activation order live on the model only between
``on_train_begin`` and ``on_train_end``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from halfprec.errors import require
from halfprec.train.config import TrainConfig
from halfprec.train.grads import full_tensor, params_with_grad, total_norm
from halfprec.train.watch import GradientWatch, NonFinite, diverged

_transformers: Any = require("transformers", "demo", "halfprec.train.hf (Trainer callback)")

_LOG = logging.getLogger("halfprec.train.hf")


@dataclass(frozen=True)
class SkippedStep:
    """One optimizer step the callback (or fp16's GradScaler) skipped."""

    step: int
    """Trainer's ``global_step`` when the step was skipped (optimizer steps so far)."""
    gradients: NonFinite
    activation: str | None
    """The first module, in forward order, whose output held inf/NaN (None: none did)."""

    def describe(self) -> str:
        where = f"; first inf/NaN activation: {self.activation}" if self.activation else ""
        return f"step {self.step}: first inf/NaN gradient: {self.gradients.describe()}{where}"


class MixedPrecisionCallback(_transformers.TrainerCallback):  # type: ignore[misc]
    """Skip inf/NaN optimizer steps, bound the fp16 loss scale, and stop a diverged run.

    ``config``: the :class:`TrainConfig` fields that apply here are ``min_scale``,
    ``max_scale`` (fp16 only) and ``max_consecutive_skips``; accumulation, clipping and the
    scaler's own settings stay Trainer's (``gradient_accumulation_steps``,
    ``max_grad_norm``, ``fp16``/``bf16``). ``activations``: also record the first module
    whose forward output held inf/NaN (one ``aminmax`` per module output in training
    forwards, no sync); with False, a skipped step names gradients only.
    """

    def __init__(self, config: TrainConfig | None = None, *, activations: bool = True) -> None:
        self.config = config if config is not None else TrainConfig()
        self.activations = activations
        self.skipped: list[SkippedStep] = []
        self.steps_applied = 0
        self.consecutive_skips = 0
        self._watch = GradientWatch()
        self._pending: SkippedStep | None = None
        self._dropped = False
        self._dtype: torch.dtype | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32
        model = kwargs.get("model")
        if isinstance(model, nn.Module):
            self._watch.add(model, activations=self.activations)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._watch.remove()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        optimizer = kwargs["optimizer"]
        self._pending = None
        if _scaling(optimizer):  # fp16: the GradScaler skips the step; no read here
            return
        params = params_with_grad([optimizer])
        # bf16/fp32: whether to drop the gradients is a host decision, the step's one read
        if not params or torch.isfinite(full_tensor(total_norm(params))).item():
            return
        gradients = self._watch.find([optimizer])
        self._pending = SkippedStep(state.global_step, gradients, self._watch.first_activation())
        if getattr(optimizer, "scaler", None) is None:  # bf16/fp32: nothing skips it but us
            for param in params:
                param.grad = None  # torch optimizers leave a parameter without grad alone
            self._dropped = True
            if hasattr(optimizer, "_is_overflow"):
                # Accelerate's flag that Trainer reads to hold the lr schedule back on a
                # skipped step (AcceleratedOptimizer.step_was_skipped); reset in on_step_end
                optimizer._is_overflow = True

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        optimizer = kwargs["optimizer"]
        scaler = getattr(optimizer, "scaler", None)
        skipped = self._dropped or bool(getattr(optimizer, "step_was_skipped", False))
        if scaler is not None and scaler.is_enabled():
            self._clamp_scale(scaler)
        if not skipped:
            self.steps_applied += 1
            self.consecutive_skips = 0
            self._watch.reset()
            return
        record = self._pending or SkippedStep(  # fp16: the scaler skipped it; find why now
            state.global_step, self._watch.find([optimizer]), self._watch.first_activation()
        )
        self.skipped.append(record)
        self.consecutive_skips += 1
        _LOG.warning("halfprec: skipped an inf/NaN optimizer step, %s", record.describe())
        self._watch.reset()
        limit = self.config.max_consecutive_skips
        if limit is not None and self.consecutive_skips >= limit:
            first = self.skipped[-self.consecutive_skips]
            scale = float(scaler.get_scale()) if scaler is not None else None
            self._watch.remove()  # train() ends here, without on_train_end
            raise diverged(
                self.consecutive_skips, scale, first.gradients, first.activation, self._dtype
            )

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._dropped:
            optimizer = kwargs["optimizer"]
            if hasattr(optimizer, "_is_overflow"):
                optimizer._is_overflow = False
            self._dropped = False
        self._pending = None

    def _clamp_scale(self, scaler: Any) -> None:
        """The loss scale kept within the config's bounds where it lies (no read: the
        scaler's scale tensor is clamped on its device)."""
        scale = scaler._get_scale_async()  # get_scale() would read it to the host
        if scale is not None:
            bounded = scale.clamp(self.config.min_scale, self.config.max_scale)
            scaler.update(new_scale=bounded)


def _scaling(optimizer: Any) -> bool:
    """Whether an enabled GradScaler steps ``optimizer`` (Trainer's fp16)."""
    scaler = getattr(optimizer, "scaler", None)
    return scaler is not None and bool(scaler.is_enabled())
