"""halfprec's MixedPrecision in an Accelerate loop, next to plain Accelerate bf16.

    PYTHONPATH=src python examples/accelerate_bf16.py --recipe halfprec
    PYTHONPATH=src python examples/accelerate_bf16.py --recipe plain

The recipe: let Accelerate place the model, optimizer and data (``accelerator.prepare``,
with ``mixed_precision="no"``), and let ``MixedPrecision`` do autocast, the backward and
the checked step::

    accelerator = Accelerator(mixed_precision="no")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    mp = MixedPrecision("bf16", device=accelerator.device)
    for x, y in loader:
        with mp.autocast():
            loss = loss_fn(model(x), y)
        mp.backward(loss)
        mp.step(optimizer)          # skips the step if any gradient is inf/NaN

Each run trains twice from the same seed: once clean, once with an inf forced out of the
first layer at step ``--nan-step``. It prints one JSON object: both loss curves, whether
every parameter is still finite after the NaN run, and the steps halfprec skipped. Plain
Accelerate bf16 applies the NaN step and every parameter stays NaN from then on.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import torch
from torch import nn

from halfprec.train import MixedPrecision

STEPS = 8


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 1))


def _loader() -> torch.utils.data.DataLoader[Any]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(16 * STEPS, 8, generator=gen)
    y = x.sum(dim=1, keepdim=True).sin()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)


def train(accelerator: Any, recipe: str, nan_step: int | None) -> dict[str, Any]:
    """One run of STEPS steps; ``nan_step`` (from 0): the step whose forward makes an inf."""
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _loader())
    calls = [0]

    def overflow(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        return output * math.inf if calls[0] - 1 == nan_step else output

    accelerator.unwrap_model(model)[0].register_forward_hook(overflow)
    mp = MixedPrecision("bf16", device=accelerator.device) if recipe == "halfprec" else None
    losses: list[float | None] = []
    skipped: list[int] = []
    for step, (x, y) in enumerate(loader):
        if mp is None:  # plain Accelerate: autocast from prepare(), its own backward
            loss = nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        else:
            with mp.autocast():
                loss = nn.functional.mse_loss(model(x), y)
            mp.backward(loss)
            if mp.step(optimizer).skipped:
                skipped.append(step)
        value = float(loss.detach())
        losses.append(value if math.isfinite(value) else None)  # JSON has no NaN
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    return {"losses": losses, "finite": finite, "skipped": skipped}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from accelerate import Accelerator

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=["halfprec", "plain"], default="halfprec")
    parser.add_argument("--nan-step", type=int, default=3)
    args = parser.parse_args(argv)
    precision = "bf16" if args.recipe == "plain" else "no"  # halfprec autocasts itself
    accelerator = Accelerator(mixed_precision=precision, cpu=True)
    result = {
        "recipe": args.recipe,
        "clean": train(accelerator, args.recipe, None),
        "nan": train(accelerator, args.recipe, args.nan_step),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
