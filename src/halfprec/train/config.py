"""Settings of a mixed-precision training run, and what one optimizer step did."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from halfprec.errors import HalfprecError


class TrainingStateError(HalfprecError, RuntimeError):
    """A training verb called out of order, or state that does not fit this run."""


StepStatus = Literal["applied", "skipped", "accumulating"]


@dataclass(frozen=True)
class TrainConfig:
    """Loss-scaling, watchdog and accumulation settings. Checked when created.

    The scaler fields mean what they mean in ``torch.amp.GradScaler``. ``min_scale`` and
    ``max_scale`` bound the loss scale; ``max_consecutive_skips`` raises
    :class:`TrainingDivergedError` after that many skipped steps in a row (``None``: never).
    ``accumulation_steps`` micro-batches make one optimizer step. With ``zero_grad`` the
    step clears the gradients it consumed, applied or skipped.
    """

    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    min_scale: float = 1.0
    max_scale: float = 2.0**24
    max_consecutive_skips: int | None = 25
    accumulation_steps: int = 1
    zero_grad: bool = True

    def __post_init__(self) -> None:
        for name in ("init_scale", "min_scale", "max_scale"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"TrainConfig({name}={value!r}): must be a finite number > 0")
        if not self.min_scale <= self.init_scale <= self.max_scale:
            raise ValueError(
                f"TrainConfig(min_scale={self.min_scale}, init_scale={self.init_scale}, "
                f"max_scale={self.max_scale}): need min_scale <= init_scale <= max_scale"
            )
        if not self.growth_factor > 1.0:
            raise ValueError(
                f"TrainConfig(growth_factor={self.growth_factor}): must be > 1, e.g. 2.0"
            )
        if not 0.0 < self.backoff_factor < 1.0:
            raise ValueError(
                f"TrainConfig(backoff_factor={self.backoff_factor}): must be in (0, 1), e.g. 0.5"
            )
        if self.growth_interval < 1:
            raise ValueError(
                f"TrainConfig(growth_interval={self.growth_interval}): must be >= 1, e.g. 2000"
            )
        if self.max_consecutive_skips is not None and self.max_consecutive_skips < 1:
            raise ValueError(
                f"TrainConfig(max_consecutive_skips={self.max_consecutive_skips}): "
                "must be >= 1, or None to turn the watchdog off"
            )
        if self.accumulation_steps < 1:
            raise ValueError(
                f"TrainConfig(accumulation_steps={self.accumulation_steps}): must be >= 1"
            )


@dataclass(frozen=True)
class StepOutcome:
    """What one call of :meth:`MixedPrecision.step` did.

    ``status`` is ``"applied"`` (the optimizers stepped), ``"skipped"`` (a gradient was
    inf/NaN: nothing changed but the loss scale backed off) or ``"accumulating"`` (fewer
    than ``accumulation_steps`` micro-batches so far: nothing happened). ``grad_norm`` is
    the unscaled total L2 norm before clipping (``None`` while accumulating).
    ``scale_before``/``scale_after`` are the loss scale around the step (1.0 without a
    scaler). ``step`` counts applied optimizer steps so far.
    """

    status: StepStatus
    scale_before: float
    scale_after: float
    grad_norm: float | None
    found_inf: bool
    step: int

    @property
    def applied(self) -> bool:
        return self.status == "applied"

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"
