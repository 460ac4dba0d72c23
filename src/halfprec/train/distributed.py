"""Settings for torch.distributed's own engines (DDP, FSDP2) that match a MixedPrecision run.

DDP needs nothing special: autocast around the forward, ``mp.backward``, ``mp.step``;
gradients are all-reduced before ``step`` sees them, so every rank skips together. FSDP2
(``fully_shard``) casts parameters itself through a ``MixedPrecisionPolicy``; with fp16 the
``MixedPrecision`` of each rank uses a sharded GradScaler that all-reduces found-inf, so
an overflow in one rank's shard skips the step everywhere.
"""

from __future__ import annotations

import torch

from halfprec.train.mixed import MixedPrecision

__all__ = ["fsdp_policy"]


def fsdp_policy(mp: MixedPrecision) -> torch.distributed.fsdp.MixedPrecisionPolicy:
    """``MixedPrecisionPolicy`` for ``fully_shard``: compute in ``mp.dtype``, keep fp32
    sharded master weights, and reduce gradients in fp32 so the sum over ranks of (scaled)
    fp16 gradients cannot overflow."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=mp.dtype, reduce_dtype=torch.float32)
