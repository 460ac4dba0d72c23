"""Step 8: a one-process ``torchrun`` run of DDP (with halfprec's MixedPrecision) and
FSDP2 (``fully_shard`` with a bf16 MixedPrecisionPolicy), over NCCL on a GPU and gloo in
a dry run. This file is also the worker torchrun starts."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from common import Context, env_with_src
from torch import nn

__all__ = ["ddp_and_fsdp2"]

HERE = Path(__file__).resolve()


def _mlp(device: torch.device) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 1)).to(device)


def _ddp(device: torch.device, dtype: str) -> str:
    from torch.nn.parallel import DistributedDataParallel

    from halfprec.train import MixedPrecision

    model = DistributedDataParallel(
        _mlp(device), device_ids=[device] if device.type == "cuda" else None
    )
    mp = MixedPrecision(dtype, device)  # fp16: a scaler that agrees across ranks
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 64, device=device), torch.randn(32, 1, device=device)
    losses = []
    for _ in range(3):
        with mp.autocast():
            loss = nn.functional.mse_loss(model(x).float(), y)
        mp.backward(loss)
        mp.step(opt)
        losses.append(float(loss))
    return (
        f"DDP + MixedPrecision({dtype!r}): {mp.steps_applied}/3 steps applied, losses "
        + ", ".join(f"{v:.4f}" for v in losses)
    )


def _fsdp2(device: torch.device) -> str:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = _mlp(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64, device=device), torch.randn(32, 1, device=device)
    losses = []
    for _ in range(3):
        out = model(x)
        loss = nn.functional.mse_loss(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    return f"FSDP2 fully_shard, bf16 params: forward in {out.dtype}, losses " + ", ".join(
        f"{v:.4f}" for v in losses
    )


def _worker(backend: str, result: Path) -> None:
    dist.init_process_group(backend)
    try:
        if backend == "nccl":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
        lines = [f"torchrun, world size {dist.get_world_size()}, backend {dist.get_backend()}"]
        lines.append(_ddp(device, "fp16" if device.type == "cuda" else "bf16"))
        lines.append(_fsdp2(device))
        if dist.get_rank() == 0:
            result.write_text(json.dumps(lines))
    finally:
        dist.destroy_process_group()


def _torchrun(result: Path, backend: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=1",
            str(HERE),
            "--backend",
            backend,
            "--result",
            str(result),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env_with_src(),
    )


def ddp_and_fsdp2(ctx: Context) -> list[str]:
    """Step 8: start the worker under ``torchrun --standalone --nproc_per_node=1``."""
    backend = "gloo" if ctx.dry_run else "nccl"
    with tempfile.TemporaryDirectory(prefix="halfprec-gpu-check-") as tmp:
        result = Path(tmp) / "result.json"
        try:
            done = _torchrun(result, backend, ctx.inner_timeout())
        except subprocess.TimeoutExpired as exc:
            said = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
            tail = " | ".join(said.strip().splitlines()[-3:])[:300]
            raise RuntimeError(f"torchrun stopped after {exc.timeout:.0f} s: {tail}") from None
        if done.returncode != 0 or not result.exists():
            tail = [s for s in done.stderr.strip().splitlines() if "Error" in s][-2:]
            raise RuntimeError(f"torchrun exited {done.returncode}: {' | '.join(tail)[:300]}")
        lines: list[str] = json.loads(result.read_text())
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["nccl", "gloo"], required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    _worker(args.backend, args.result)
