"""Gradients as ``MixedPrecision`` and the Trainer callback read them: which parameters
have one, their total norm (over every rank under FSDP2), and a DTensor's local shard.

None of these functions syncs the host with the device: each returns tensors, and the
caller decides when (and whether) to read a number.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def params_with_grad(optimizers: Sequence[torch.optim.Optimizer]) -> list[torch.Tensor]:
    """The parameters of ``optimizers`` that have a gradient now, in group order."""
    return [
        p
        for optimizer in optimizers
        for group in optimizer.param_groups
        for p in group["params"]
        if p.grad is not None
    ]


def total_norm(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all of ``params``' gradients together, as a 0-d tensor on the first
    gradient's device (inf/NaN when any gradient holds inf/NaN). ``params`` must have
    gradients; a DTensor norm is the local shards' (see :func:`full_tensor`)."""
    grads = [p.grad for p in params if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads)


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor (FSDP2 gradients and their norm) reduced over all ranks; a plain tensor
    as it is."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor (FSDP2 parameters, gradients, optimizer state); a plain
    tensor as it is."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor
