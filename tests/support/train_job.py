"""A small, seeded training run used by the resume tests (imported, or run as a script).

It uses the global RNGs (shuffling, dropout), a scheduler, gradient clipping and
deliberately skipped steps, so an exact resume needs every part of the checkpoint.
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

import torch
from torch import nn

from halfprec.train import MixedPrecision, TrainConfig, load_checkpoint, save_checkpoint

POISONED_STEPS = frozenset({2, 7})  # the loss is made inf here: the step must be skipped


def build(
    dtype: str, masters: bool = False
) -> tuple[nn.Module, torch.optim.Optimizer, object, MixedPrecision]:
    torch.manual_seed(0)
    random.seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.2), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.9)
    mp = MixedPrecision(dtype, "cpu", TrainConfig(init_scale=2.0**10, growth_interval=2))
    if masters:
        mp.use_master_weights(model, optimizer)
    return model, optimizer, scheduler, mp


def train(
    dtype: str, steps: int, out: Path, resume: Path | None = None, masters: bool = False
) -> None:
    model, optimizer, scheduler, mp = build(dtype, masters)
    gen = torch.Generator().manual_seed(123)
    xs, ys = torch.randn(64, 8, generator=gen), torch.randint(0, 4, (64,), generator=gen)
    start = 0
    if resume is not None:
        resumed = load_checkpoint(resume, model, optimizer, mp=mp, scheduler=scheduler)
        start = int(resumed.counters["step"])
    for step in range(start, start + steps):
        pick = torch.randperm(64)[: 8 + random.randrange(8)]
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(xs[pick]), ys[pick])
        if step in POISONED_STEPS:
            loss = loss * math.inf
        mp.backward(loss)
        mp.step(optimizer, clip_grad_norm=1.0, schedulers=[scheduler])
    save_checkpoint(
        out, model, optimizer, mp=mp, scheduler=scheduler, counters={"step": start + steps}
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--masters", action="store_true", help="master-weight mode")
    args = parser.parse_args()
    train(args.dtype, args.steps, args.out, args.resume, args.masters)
