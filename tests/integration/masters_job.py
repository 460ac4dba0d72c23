"""Worker for tests/integration/test_ddp_masters.py: master-weight mode under torchrun (gloo).

In one process group:
1. DDP, bf16 master weights, ``fp32_reduce_hook``: the first step's master gradients and the
   local bf16 gradients of every rank (from an unwrapped twin) are kept, then STEPS steps;
2. DDP, fp16 master weights, an inf loss on rank 1 only at POISON_STEP: the masters before
   and after that step are kept;
3. FSDP2 (``fully_shard`` + ``fsdp_policy``) in bf16, with ``use_master_weights`` called on
   the sharded model: FSDP2's own fp32 shards are the masters.
Each rank writes rank<R>.json (step outcomes) and rank<R>.safetensors (tensors).
"""

from __future__ import annotations

import copy
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

from halfprec.train import MixedPrecision, exit_worker, fp32_reduce_hook, fsdp_policy

STEPS = 5
POISON_STEP = 2
GLOBAL_BATCH = 16


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(2000 + step)
    return torch.randn(GLOBAL_BATCH, 16, generator=gen), torch.randint(
        0, 4, (GLOBAL_BATCH,), generator=gen
    )


def local_batch(step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = global_batch(step)
    part = GLOBAL_BATCH // world
    return x[rank * part : (rank + 1) * part], y[rank * part : (rank + 1) * part]


def loss_of(mp: MixedPrecision, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with mp.autocast():
        return nn.functional.cross_entropy(model(x).float(), y)


def masters_of(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p.detach().clone() for g in optimizer.param_groups for p in g["params"]]


def _ddp_bf16(rank: int, world: int, tensors: dict[str, torch.Tensor]) -> list[dict[str, object]]:
    model, optimizer = build()
    mp = MixedPrecision("bf16", "cpu")
    mp.use_master_weights(model, optimizer)
    twin = copy.deepcopy(model)
    x, y = local_batch(0, rank, world)
    loss_of(mp, twin, x, y).backward()
    for i, p in enumerate(twin.parameters()):
        gathered = [torch.empty_like(p.grad) for _ in range(world)]  # type: ignore[arg-type]
        dist.all_gather(gathered, p.grad)  # type: ignore[arg-type]
        for r, g in enumerate(gathered):
            tensors[f"local.{i}.{r}"] = g
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(None, fp32_reduce_hook)
    outcomes = []
    for step in range(STEPS):
        mp.backward(loss_of(mp, ddp, *local_batch(step, rank, world)))
        if step == 0:
            masters = [p for g in optimizer.param_groups for p in g["params"]]
            for i, m in enumerate(masters):
                tensors[f"reduced.{i}"] = m.grad.detach().clone()  # type: ignore[union-attr]
        outcomes.append(asdict(mp.step(optimizer)))
    for i, m in enumerate(masters_of(optimizer)):
        tensors[f"ddp.master.{i}"] = m
    for i, p in enumerate(model.parameters()):
        tensors[f"ddp.param.{i}"] = p.detach()
    return outcomes


def _ddp_fp16(rank: int, world: int, tensors: dict[str, torch.Tensor]) -> list[dict[str, object]]:
    model, optimizer = build()
    mp = MixedPrecision("fp16", "cpu")
    mp.use_master_weights(model, optimizer)
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(None, fp32_reduce_hook)
    outcomes = []
    for step in range(STEPS):
        loss = loss_of(mp, ddp, *local_batch(step, rank, world))
        if step == POISON_STEP and rank == 1:
            loss = loss * math.inf
        if step == POISON_STEP:
            for i, m in enumerate(masters_of(optimizer)):
                tensors[f"fp16.before.{i}"] = m
        mp.backward(loss)
        outcomes.append(asdict(mp.step(optimizer)))
        if step == POISON_STEP:
            for i, m in enumerate(masters_of(optimizer)):
                tensors[f"fp16.after.{i}"] = m
    return outcomes


def _fsdp_bf16(rank: int, world: int, tensors: dict[str, torch.Tensor]) -> list[dict[str, object]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model, _ = build()
    mp = MixedPrecision("bf16", "cpu")
    mesh = init_device_mesh("cpu", (world,))
    for layer in list(model.children())[::2]:
        fully_shard(layer, mesh=mesh, mp_policy=fsdp_policy(mp))
    fully_shard(model, mesh=mesh, mp_policy=fsdp_policy(mp))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mp.use_master_weights(model, optimizer)  # FSDP2 keeps the fp32 masters: nothing changes
    outcomes = []
    for step in range(STEPS):
        x, y = local_batch(step, rank, world)
        out = model(x)
        mp.backward(nn.functional.cross_entropy(out.float(), y))
        outcome = mp.step(optimizer)
        outcomes.append({**asdict(outcome), "compute_dtype": str(out.dtype)})
    for i, p in enumerate(model.parameters()):
        tensors[f"fsdp.master.{i}"] = p.full_tensor().detach()  # type: ignore[attr-defined]
    tensors["fsdp.dtypes"] = torch.tensor([p.dtype == torch.float32 for p in model.parameters()])
    tensors["fsdp.mode"] = torch.tensor([mp.master_weights])
    return outcomes


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tensors: dict[str, torch.Tensor] = {}
    results = {
        "ddp_bf16": _ddp_bf16(rank, world, tensors),
        "ddp_fp16": _ddp_fp16(rank, world, tensors),
        "fsdp_bf16": _fsdp_bf16(rank, world, tensors),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(results))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / f"rank{rank}.safetensors"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    exit_worker()
