"""Settings for torch.distributed's own engines (DDP, FSDP2) that match a MixedPrecision run.

DDP needs nothing special: autocast around the forward, ``mp.backward``, ``mp.step``;
gradients are all-reduced before ``step`` sees them, so every rank skips together. In
master-weight mode (bf16/fp16 parameters, so bf16/fp16 gradients) register
:func:`fp32_reduce_hook` so that the sum over ranks is taken in fp32. FSDP2
(``fully_shard``) casts parameters itself through a ``MixedPrecisionPolicy``; with fp16 the
``MixedPrecision`` of each rank uses a sharded GradScaler that all-reduces found-inf, so
an overflow in one rank's shard skips the step everywhere.

Ending a worker: :func:`exit_worker`. ``destroy_process_group`` drops torch's own references
to the process group, but DDP's reducer and FSDP2's parameter groups keep the C++ gloo
process group alive -- with its ``pt_gloo_runloop`` and ``gloo_tcp_loop`` threads -- past
``destroy_process_group``, even after ``del`` and ``gc.collect()`` (measured: the three
threads are still in ``/proc/self/task``). They are then torn down during interpreter
finalization; a gloo thread that releases work holding Python-owned tensors at that point
needs the GIL, is ended by the finalizing interpreter inside a ``noexcept`` frame, and the
rank dies with ``terminate called without an active exception`` (SIGABRT). Leaving the
process with ``os._exit`` after a barrier and ``destroy_process_group`` skips that
finalization: no C++ thread ever meets a dying interpreter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

import torch

from halfprec.train.mixed import MixedPrecision


def fsdp_policy(mp: MixedPrecision) -> torch.distributed.fsdp.MixedPrecisionPolicy:
    """``MixedPrecisionPolicy`` for ``fully_shard``: compute in ``mp.dtype``, keep fp32
    sharded master weights, and reduce gradients in fp32 so the sum over ranks of (scaled)
    fp16 gradients cannot overflow."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=mp.dtype, reduce_dtype=torch.float32)


def fp32_reduce_hook(
    process_group: torch.distributed.ProcessGroup | None,
    bucket: torch.distributed.GradBucket,
) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: all-reduce a bucket of bf16/fp16 gradients in fp32.

    ``ddp.register_comm_hook(None, fp32_reduce_hook)``. The bucket is widened to fp32,
    divided by the world size, summed over ranks, and rounded back into the bucket once: a
    half-precision all-reduce would round after every partial sum (and fp16 sums of
    loss-scaled gradients can overflow). fp32 buckets are reduced as they are.
    """
    import torch.distributed as dist

    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    wide = buffer.to(torch.float32).div_(dist.get_world_size(group))
    future = dist.all_reduce(wide, group=group, async_op=True).get_future()

    def narrow(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        buffer.copy_(done.value()[0])
        return buffer

    return future.then(narrow)


if torch.distributed.is_available():
    # DDP checks the hook's annotations as objects; this module's are strings (PEP 563).
    fp32_reduce_hook.__annotations__ |= {
        "bucket": torch.distributed.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }


def exit_worker(code: int = 0) -> NoReturn:
    """End a torchrun worker cleanly: barrier (every rank has finished its collectives),
    destroy the process group, flush stdout/stderr and logging, then ``os._exit(code)``.

    Call it last in the worker's ``if __name__ == "__main__":`` block, after everything that
    writes files has returned (``atexit`` handlers do not run). It never returns.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing to flush
            stream.flush()
    os._exit(code)
