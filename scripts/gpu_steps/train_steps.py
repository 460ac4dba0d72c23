"""Steps 5 and 6: fp16 loss scaling with one injected inf, and bf16 weights with
StochasticAdamW against torch.optim.AdamW on fp32 weights."""

from __future__ import annotations

import torch
from common import Context
from torch import nn

from halfprec.timing import Stopwatch
from halfprec.train import MixedPrecision, StochasticAdamW

__all__ = ["scaler_with_an_inf", "stochastic_adamw_step"]


def _mlp(width: int, depth: int) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def scaler_with_an_inf(ctx: Context) -> list[str]:
    """Step 5: MixedPrecision("fp16", device) for 20 steps, an inf in the loss at step 8:
    that step is skipped, the scale backs off, the other 19 apply."""
    width = ctx.size(512, 16)
    model = _mlp(width, 2).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mp = MixedPrecision("fp16", ctx.device)
    x, y = torch.randn(32, width, device=ctx.device), torch.randn(32, 1, device=ctx.device)
    outcomes = []
    for step in range(20):
        with mp.autocast():
            loss = nn.functional.mse_loss(model(x).float(), y)
        if step == 7:
            loss = loss * float("inf")  # the injected inf
        mp.backward(loss)
        outcomes.append(mp.step(opt))
    skipped = [i for i, o in enumerate(outcomes) if o.skipped]
    bad = outcomes[7]
    lines = [
        f"skipped steps: {skipped} (want [7]); applied {mp.steps_applied}, "
        f"skipped {mp.steps_skipped} (want 19 and 1)",
        f"scale at the inf: {bad.scale_before:g} -> {bad.scale_after:g} (want halved)",
        f"last step's count: {outcomes[-1].step}",
    ]
    if skipped != [7] or mp.steps_applied != 19 or not bad.scale_after < bad.scale_before:
        raise RuntimeError("; ".join(lines))
    return lines


def _step_time(ctx: Context, model: nn.Module, opt: torch.optim.Optimizer, rounds: int) -> float:
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    times = []
    for _ in range(rounds):
        watch = Stopwatch(ctx.device).start()
        opt.step()
        times.append(watch.stop())
    return sorted(times)[len(times) // 2]


def stochastic_adamw_step(ctx: Context) -> list[str]:
    """Step 6: a 100M-parameter model in bf16 with StochasticAdamW, its optimizer step
    timed against torch.optim.AdamW on the same model in fp32 (interleaved rounds)."""
    width, depth = ctx.size(2048, 32), ctx.size(24, 2)  # 24 x 2048^2: 100.7M parameters
    fp32 = _mlp(width, depth).to(ctx.device)
    bf16 = _mlp(width, depth).to(ctx.device, torch.bfloat16)
    params = sum(p.numel() for p in fp32.parameters())
    stochastic = StochasticAdamW(bf16.parameters(), lr=1e-4)
    adamw = torch.optim.AdamW(fp32.parameters(), lr=1e-4)
    rounds = ctx.size(3, 2)
    ours, theirs = [], []
    for _ in range(3):  # interleaved, so that drift hits both alike
        ours.append(_step_time(ctx, bf16, stochastic, rounds))
        theirs.append(_step_time(ctx, fp32, adamw, rounds))
    a, b = min(ours), min(theirs)
    finite = all(bool(torch.isfinite(p).all()) for p in bf16.parameters())
    lines = [
        f"{params:,} parameters; StochasticAdamW (bf16) step {ctx.time(a)}, "
        f"torch.optim.AdamW (fp32) step {ctx.time(b)}"
        + ("" if ctx.dry_run else f": {b / a:.2f}x AdamW's speed"),
        f"bf16 weights finite after {3 * rounds} steps: {finite}",
    ]
    if not finite:
        raise RuntimeError("; ".join(lines))
    return lines
