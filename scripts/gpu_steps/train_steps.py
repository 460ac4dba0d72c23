"""Steps 5 and 6: fp16 loss scaling with one injected inf, and bf16 weights with
StochasticAdamW against torch.optim.AdamW on fp32 weights."""

from __future__ import annotations

import torch
from common import Context
from torch import nn
from torch._dynamo.utils import counters

from halfprec.timing import Stopwatch
from halfprec.train import MixedPrecision, StochasticAdamW
from halfprec.train.adamw_kernel import COMPILE_FROM

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


def _kernel_compiled(opt: StochasticAdamW, params: int, graphs: int) -> str:
    """Whether the optimizer's buckets ran the compiled kernel (what GPU users run), in a
    line: ``graphs``, the graphs dynamo compiled during the steps; a model under the
    threshold, or a compile that fell back to eager, says so."""
    if opt.kernel.failed is not None:
        return f"the compiled bucket kernel failed to compile: {opt.kernel.failed}"
    if params < COMPILE_FROM or graphs == 0:
        return f"the compiled bucket kernel did not run ({params:,} elements, 2**20 needed)"
    return f"the compiled bucket kernel ran ({params:,} elements >= 2**20; {graphs} graph)"


def stochastic_adamw_step(ctx: Context) -> list[str]:
    """Step 6: a 100M-parameter model in bf16 with StochasticAdamW, its optimizer step
    timed against torch.optim.AdamW on the same model in fp32 (interleaved rounds)."""
    # 24 x 2048^2: 100.7M parameters; a dry run 1024^2 + 2,049: one bucket just above the
    # size from which the kernel runs compiled (COMPILE_FROM, 2**20), so inductor compiles
    # it on the CPU as on a GPU
    width, depth = ctx.size(2048, 1024), ctx.size(24, 1)
    fp32 = _mlp(width, depth).to(ctx.device)
    bf16 = _mlp(width, depth).to(ctx.device, torch.bfloat16)
    params = sum(p.numel() for p in fp32.parameters())
    stochastic = StochasticAdamW(bf16.parameters(), lr=1e-4)
    adamw = torch.optim.AdamW(fp32.parameters(), lr=1e-4)
    rounds = ctx.size(3, 2)
    graphs = counters["stats"]["unique_graphs"]
    ours, theirs = [], []
    for _ in range(3):  # interleaved, so that drift hits both alike
        ours.append(_step_time(ctx, bf16, stochastic, rounds))
        theirs.append(_step_time(ctx, fp32, adamw, rounds))
    a, b = min(ours), min(theirs)
    finite = all(bool(torch.isfinite(p).all()) for p in bf16.parameters())
    compiled = _kernel_compiled(stochastic, params, counters["stats"]["unique_graphs"] - graphs)
    lines = [
        f"{params:,} parameters; StochasticAdamW (bf16) step {ctx.time(a)}, "
        f"torch.optim.AdamW (fp32) step {ctx.time(b)}"
        + ("" if ctx.dry_run else f": {b / a:.2f}x AdamW's speed"),
        f"bf16 weights finite after {3 * rounds} steps: {finite}",
        compiled,
    ]
    if not finite or not compiled.startswith("the compiled bucket kernel ran"):
        raise RuntimeError("; ".join(lines))
    return lines
