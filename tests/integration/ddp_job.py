"""Worker for tests/integration/test_ddp.py, launched with torchrun (gloo, 2 processes).

Runs, in one process group:
1. DDP + fp16 AMP for STEPS steps, each rank on its half of the global batch, with an inf
   loss injected on rank 1 only at POISON_STEP;
2. the same run split in two: RESUME_AT steps, checkpoint (rank 0 writes), fresh objects
   loaded on every rank, the remaining steps;
3. FSDP2 (fully_shard + MixedPrecisionPolicy) + fp16 with the same inf injection.
Each rank writes its step outcomes to rank<R>.json; rank 0 writes the final weights.
The single-process reference uses build() and global_batch() from this file.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from halfprec.train import (
    MixedPrecision,
    StepOutcome,
    exit_worker,
    fsdp_policy,
    load_checkpoint,
    save_checkpoint,
)

STEPS = 6
POISON_STEP = 3
RESUME_AT = 2
GLOBAL_BATCH = 16


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    return torch.randn(GLOBAL_BATCH, 16, generator=gen), torch.randint(
        0, 4, (GLOBAL_BATCH,), generator=gen
    )


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    mp: MixedPrecision,
    x: torch.Tensor,
    y: torch.Tensor,
    poison: bool,
) -> StepOutcome:
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x).float(), y)
    if poison:
        loss = loss * math.inf
    mp.backward(loss)
    return mp.step(optimizer)


def _local(step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = global_batch(step)
    part = GLOBAL_BATCH // world
    return x[rank * part : (rank + 1) * part], y[rank * part : (rank + 1) * part]


def _ddp_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    mp: MixedPrecision,
    steps: range,
    rank: int,
    world: int,
) -> list[dict[str, object]]:
    outcomes = []
    for step in steps:
        x, y = _local(step, rank, world)
        outcome = train_step(model, optimizer, mp, x, y, poison=step == POISON_STEP and rank == 1)
        outcomes.append(asdict(outcome))
    return outcomes


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    results: dict[str, object] = {}

    # 1. straight DDP run
    model, optimizer = build()
    ddp = DistributedDataParallel(model)
    mp = MixedPrecision("fp16", "cpu")
    results["ddp"] = _ddp_steps(ddp, optimizer, mp, range(STEPS), rank, world)
    straight = {k: v.detach().clone() for k, v in model.state_dict().items()}

    # 2. the same run with a checkpoint and a resume into fresh objects in the middle
    model, optimizer = build()
    ddp, mp = DistributedDataParallel(model), MixedPrecision("fp16", "cpu")
    _ddp_steps(ddp, optimizer, mp, range(RESUME_AT), rank, world)
    ckpt = out / "ddp.safetensors"
    if rank == 0:
        save_checkpoint(ckpt, ddp, optimizer, mp=mp, counters={"step": RESUME_AT})
    dist.barrier()
    model, optimizer = build()
    torch.nn.init.zeros_(model[0].weight)  # must be overwritten by the checkpoint
    ddp, mp = DistributedDataParallel(model), MixedPrecision("fp16", "cpu")
    start = int(load_checkpoint(ckpt, ddp, optimizer, mp=mp).counters["step"])
    results["resumed"] = _ddp_steps(ddp, optimizer, mp, range(start, STEPS), rank, world)
    resumed = model.state_dict()

    # 3. FSDP2
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model, _ = build()
    mp = MixedPrecision("fp16", "cpu")
    mesh = init_device_mesh("cpu", (world,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh, mp_policy=fsdp_policy(mp))
    fully_shard(model, mesh=mesh, mp_policy=fsdp_policy(mp))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fsdp_outcomes = []
    for step in range(STEPS):
        x, y = _local(step, rank, world)
        out_ = model(x)
        loss = nn.functional.cross_entropy(out_.float(), y)
        if step == POISON_STEP and rank == 1:
            loss = loss * math.inf
        mp.backward(loss)
        fsdp_outcomes.append({**asdict(mp.step(optimizer)), "compute_dtype": str(out_.dtype)})
    results["fsdp"] = fsdp_outcomes
    fsdp = {k: v.full_tensor() for k, v in model.state_dict().items()}

    (out / f"rank{rank}.json").write_text(json.dumps(results))
    if rank == 0:
        tensors = {f"straight.{k}": v for k, v in straight.items()}
        tensors |= {f"resumed.{k}": v for k, v in resumed.items()}
        tensors |= {f"fsdp.{k}": v for k, v in fsdp.items()}
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "weights.safetensors"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    exit_worker()  # barrier, destroy the group, leave before interpreter teardown
