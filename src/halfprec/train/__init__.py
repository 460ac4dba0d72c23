"""Mixed-precision training: autocast + loss scaling, checked steps, checkpoints, parallelism.

See :class:`MixedPrecision` for the training loop, :class:`StochasticAdamW` for bf16
weights (half the memory of fp32 weights, gradients and Adam state), :func:`save_checkpoint` /
:func:`load_checkpoint` for exact resume, and :func:`autocast_forward` for DataParallel.
"""

from __future__ import annotations

from halfprec.train.bf16 import StochasticAdamW, training_bytes
from halfprec.train.checkpoint import Resumed, load_checkpoint, save_checkpoint
from halfprec.train.config import StepOutcome, TrainConfig, TrainingStateError
from halfprec.train.distributed import exit_worker, fp32_reduce_hook, fsdp_policy
from halfprec.train.mixed import MixedPrecision, needs_loss_scaling
from halfprec.train.parallel import AutocastForward, autocast_forward
from halfprec.train.rounding import round_stochastic
from halfprec.train.watch import TrainingDivergedError

__all__ = [
    "MixedPrecision",
    "TrainConfig",
    "StepOutcome",
    "needs_loss_scaling",
    "save_checkpoint",
    "load_checkpoint",
    "Resumed",
    "exit_worker",
    "fsdp_policy",
    "fp32_reduce_hook",
    "autocast_forward",
    "AutocastForward",
    "TrainingDivergedError",
    "TrainingStateError",
    "StochasticAdamW",
    "round_stochastic",
    "training_bytes",
]
