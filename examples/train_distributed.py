"""Data-parallel mixed-precision training on the digits data set with torch's own engines.

    torchrun --standalone --nproc_per_node 2 examples/train_distributed.py --engine ddp
    torchrun --standalone --nproc_per_node 2 examples/train_distributed.py --engine fsdp

On CPU the processes talk over gloo, on GPUs over NCCL (torch's default backends); each
rank uses its own accelerator when there is one. With ``--engine ddp --checkpoint PATH``
rank 0 saves a checkpoint at the end, and ``--resume PATH`` continues from it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from train_digits import digits_split

from halfprec.dtypes import dtype_name
from halfprec.train import (
    MixedPrecision,
    exit_worker,
    fsdp_policy,
    load_checkpoint,
    save_checkpoint,
)


def _device() -> torch.device:
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is None:
        return torch.device("cpu")
    index = int(os.environ.get("LOCAL_RANK", "0"))
    torch.accelerator.set_device_index(index)
    return torch.device(accelerator.type, index)


def _wrap(model: nn.Module, engine: str, mp: MixedPrecision, device: torch.device) -> nn.Module:
    if engine == "ddp":
        return DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=fsdp_policy(mp))
    return fully_shard(model, mesh=mesh, mp_policy=fsdp_policy(mp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["ddp", "fsdp"], default="ddp")
    parser.add_argument("--dtype", default="auto", help="fp16, bf16 or auto")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--checkpoint", type=Path, help="ddp: save here at the end")
    parser.add_argument("--resume", type=Path, help="ddp: continue from this checkpoint")
    args = parser.parse_args()
    if args.engine == "fsdp" and (args.checkpoint or args.resume):
        parser.error("checkpoints of sharded (FSDP) state need torch.distributed.checkpoint")

    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = _device()
    x_train, x_test, y_train, y_test = (t.to(device) for t in digits_split())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    mp = MixedPrecision(args.dtype, device)
    wrapped = _wrap(model, args.engine, mp, device)
    optimizer = torch.optim.Adam(wrapped.parameters(), lr=3e-3)
    first = 0
    if args.resume:
        first = int(load_checkpoint(args.resume, wrapped, optimizer, mp=mp).counters["epoch"])

    per_rank = 64 // world
    gen = torch.Generator().manual_seed(0)
    for epoch in range(first, first + args.epochs):
        gen.manual_seed(epoch)  # the same order on every rank; each takes its own slice
        order = torch.randperm(len(x_train), generator=gen).to(device)
        for start in range(0, len(order) - 63, 64):
            pick = order[start + rank * per_rank : start + (rank + 1) * per_rank]
            with mp.autocast():
                loss = nn.functional.cross_entropy(wrapped(x_train[pick]).float(), y_train[pick])
            mp.backward(loss)
            mp.step(optimizer, clip_grad_norm=5.0)
    with torch.no_grad():
        accuracy = (wrapped(x_test).argmax(1) == y_test).float().mean().item()
    if rank == 0:
        print(
            f"{args.engine} {dtype_name(mp.dtype)} world={world}: test accuracy {accuracy:.4f}, "
            f"{mp.steps_applied} steps applied, {mp.steps_skipped} skipped, scale {mp.scale:g}"
        )
        if args.checkpoint:
            save_checkpoint(
                args.checkpoint, wrapped, optimizer, mp=mp, counters={"epoch": first + args.epochs}
            )


if __name__ == "__main__":
    main()
    exit_worker()  # barrier, destroy the group, leave before interpreter teardown
