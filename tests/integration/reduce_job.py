"""Worker for tests/integration/test_ddp_reduce.py: how DDP sums bf16 gradients over ranks.

Each rank's gradient of one bf16 parameter is a vector chosen by :func:`rank_gradient` (the
loss is ``(w * x).sum()``, so the gradient is ``x``). The vector is reduced twice in master-
weight mode: by DDP with ``fp32_reduce_hook`` and by DDP's default bf16 all-reduce. Each
rank writes both reduced fp32 master gradients to rank<R>.safetensors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from halfprec.train import MixedPrecision, exit_worker, fp32_reduce_hook

SIZE = 4096


def rank_gradient(rank: int, world: int) -> torch.Tensor:
    """Signed ``world * k * 2**e`` (k < 86, e < 7): bf16 values whose share ``x / world``
    and every partial sum of the shares are exact in fp32, so the mean rounded once to bf16
    does not depend on the order the ranks are summed in, while a bf16 running sum rounds."""
    gen = torch.Generator().manual_seed(100 + rank)
    k = torch.randint(1, 86, (SIZE,), generator=gen)
    e = torch.randint(0, 7, (SIZE,), generator=gen)
    sign = torch.randint(0, 2, (SIZE,), generator=gen) * 2 - 1
    return (sign * world * k * 2.0**e).to(torch.bfloat16)


class Vector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(SIZE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.w * x).sum()


def reduced(rank: int, world: int, hook: bool) -> torch.Tensor:
    model = Vector()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("bf16", "cpu")
    mp.use_master_weights(model, optimizer)
    ddp = DistributedDataParallel(model)
    if hook:
        ddp.register_comm_hook(None, fp32_reduce_hook)
    mp.backward(ddp(rank_gradient(rank, world)))
    master = optimizer.param_groups[0]["params"][0]
    return master.grad.detach().clone()


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tensors = {
        "hook": reduced(rank, world, hook=True),
        "default": reduced(rank, world, hook=False),
        "world": torch.tensor(world),
    }
    save_file(tensors, str(out / f"rank{rank}.safetensors"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    exit_worker()
