"""StochasticAdamW's optimizer step against torch.optim.AdamW on fp32 weights, and its loss.

    PYTHONPATH=src python benchmarks/stochastic_adamw.py [--rounds 6] [--no-sliced]
        [--bucket-log2 24 ...] [--no-loss]

Speed: one MLP of 21M parameters (512-4096-4096-512), with fixed random gradients, and
one optimizer step per variant per round, the variants interleaved round by round in one
process so that they see the same machine load (the first round warms up):

- ``torch AdamW fp32``: ``torch.optim.AdamW`` on fp32 weights, torch's default
  implementation on this device (a for-loop over parameters on CPU);
- ``torch AdamW fp32 fused``: the same with ``fused=True``;
- ``StochasticAdamW bf16``: halfprec's, on bf16 weights (buckets of 2**22 elements, its
  kernel compiled: the warm-up round compiles it);
- ``StochasticAdamW bf16, compile=False``: the same kernel run eagerly in chunks (where
  no C++ compiler is installed);
- ``StochasticAdamW bf16, bucket=2**N``: the same with other bucket sizes
  (``--bucket-log2 N``, repeatable), each on its own copy of the weights;
- ``sliced (before)``: the implementation before buckets (64K-element slices, ~36 kernels
  each), kept here as the reference.

Loss: 50 steps of a 128-512-10 MLP learning a fixed random teacher under
``MixedPrecision("bf16")``, for bf16 weights with StochasticAdamW and with the sliced
reference, and fp32 weights with torch's AdamW; final losses over 3 seeds.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from halfprec.timing import now
from halfprec.train import MixedPrecision, StochasticAdamW, round_stochastic


class SlicedStochasticAdamW(torch.optim.Optimizer):
    """StochasticAdamW as it was before buckets: AdamW in fp32 per 64K-element slice, the
    weight and moments stochastically rounded one slice at a time (the reference)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, seed: int = 0) -> None:
        super().__init__(
            params, {"lr": lr, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
        )
        self.generator = torch.Generator().manual_seed(seed)

    def _store(self, target: torch.Tensor, value: torch.Tensor) -> None:
        if target.dtype == torch.bfloat16:
            target.copy_(round_stochastic(value, self.generator))
        else:
            target.copy_(value)

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(
                        step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p)
                    )
                state["step"] += 1
                flat = [t.view(-1) for t in (p, p.grad, state["exp_avg"], state["exp_avg_sq"])]
                for start in range(0, p.numel(), 1 << 16):
                    part = [t[start : start + (1 << 16)] for t in flat]
                    self._update(part, group, state["step"])

    def _update(self, tensors: list[torch.Tensor], group: dict[str, Any], t: int) -> None:
        p, grad_in, m, v = tensors
        lr, (beta1, beta2) = group["lr"], group["betas"]
        grad = grad_in.float()
        weight = p.float() * (1 - lr * group["weight_decay"])
        exp_avg = m.float().lerp_(grad, 1 - beta1)
        exp_avg_sq = v.float().lerp_(grad.square(), 1 - beta2)
        denom = (exp_avg_sq / (1 - beta2**t)).sqrt_().add_(group["eps"])
        weight.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**t))
        self._store(m, exp_avg)
        self._store(v, exp_avg_sq)
        self._store(p, weight)


def _mlp(widths: tuple[int, ...], seed: int, dtype: torch.dtype) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for a, b in zip(widths, widths[1:], strict=False):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1]).to(dtype)


def _optimizer_steps(sliced: bool, buckets: list[int]) -> dict[str, Callable[[], object]]:
    widths = (512, 4096, 4096, 512)
    models = {"fp32": _mlp(widths, 0, torch.float32), "bf16": _mlp(widths, 0, torch.bfloat16)}
    gen = torch.Generator().manual_seed(1)
    for model in models.values():
        for p in model.parameters():
            p.grad = (torch.randn(p.shape, generator=gen) * 1e-3).to(p.dtype)
    fp32, bf16 = models["fp32"].parameters, models["bf16"].parameters
    steps: dict[str, Callable[[], object]] = {
        "torch AdamW fp32": torch.optim.AdamW(fp32(), lr=1e-4).step,
        "torch AdamW fp32 fused": torch.optim.AdamW(fp32(), lr=1e-4, fused=True).step,
        "StochasticAdamW bf16": StochasticAdamW(bf16(), lr=1e-4).step,
    }
    eager = _mlp(widths, 0, torch.bfloat16)  # its own copy of the bf16 weights
    for p, q in zip(eager.parameters(), bf16(), strict=True):
        p.grad = q.grad
    steps["StochasticAdamW bf16, compile=False"] = StochasticAdamW(
        eager.parameters(), lr=1e-4, compile=False
    ).step
    for bucket in buckets:  # each on its own copy of the bf16 weights
        model = _mlp(widths, 0, torch.bfloat16)
        for p, q in zip(model.parameters(), bf16(), strict=True):
            p.grad = q.grad
        name = f"StochasticAdamW bf16, bucket=2**{bucket.bit_length() - 1}"
        steps[name] = StochasticAdamW(model.parameters(), lr=1e-4, bucket=bucket).step
    if sliced:
        steps["sliced (before) bf16"] = SlicedStochasticAdamW(bf16(), lr=1e-4).step
    print(f"optimizer step, {sum(p.numel() for p in fp32()) / 1e6:.1f}M parameters")
    return steps


def time_steps(rounds: int, sliced: bool, buckets: list[int]) -> None:
    steps = _optimizer_steps(sliced, buckets)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_ in range(rounds + 1):
        for name, step in steps.items():
            start = now()
            step()
            if round_:
                times[name].append(now() - start)
    base = statistics.median(times["torch AdamW fp32"])
    print("| optimizer | step (median) | min | vs torch AdamW fp32 |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        median = statistics.median(ts)
        print(f"| {name} | {median * 1e3:.0f} ms | {min(ts) * 1e3:.0f} ms | {median / base:.2f}x |")


def final_loss(kind: str, seed: int, steps: int = 50) -> float:
    """The loss after ``steps`` steps of a 128-512-10 MLP fitting a random teacher."""
    gen = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(64 * steps, 128, generator=gen)
    teacher = torch.randn(128, 10, generator=gen) / 128**0.5
    y = torch.tanh(x @ teacher)
    model = _mlp((128, 512, 10), seed, torch.float32 if kind == "fp32" else torch.bfloat16)
    optimizers: dict[str, Callable[[], torch.optim.Optimizer]] = {
        "fp32": lambda: torch.optim.AdamW(model.parameters(), lr=1e-3),
        "bf16 StochasticAdamW": lambda: StochasticAdamW(model.parameters(), lr=1e-3, seed=seed),
        "bf16 sliced (before)": lambda: SlicedStochasticAdamW(model.parameters(), 1e-3, seed),
    }
    optimizer = optimizers[kind]()
    mp = MixedPrecision("bf16")
    loss = torch.tensor(0.0)
    for i in range(steps):
        batch = slice(64 * i, 64 * (i + 1))
        with mp.autocast():
            loss = nn.functional.mse_loss(model(x[batch]).float(), y[batch])
        mp.backward(loss)
        mp.step(optimizer)
    return float(loss.detach())


def loss_parity() -> None:
    print("\nfinal loss after 50 steps (seeds 0, 1, 2)")
    print("| run | seed 0 | seed 1 | seed 2 | mean |")
    print("|---|---|---|---|---|")
    means = {}
    for kind in ("fp32", "bf16 sliced (before)", "bf16 StochasticAdamW"):
        losses = [final_loss(kind, seed) for seed in range(3)]
        means[kind] = statistics.mean(losses)
        shown = " | ".join(f"{v:.5f}" for v in losses)
        print(f"| {kind} | {shown} | {means[kind]:.5f} |")
    gap = abs(means["bf16 StochasticAdamW"] - means["bf16 sliced (before)"])
    print(
        f"\n|mean(StochasticAdamW) - mean(sliced)| = {gap:.5f}, {gap / means['fp32']:.1%} of fp32's"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-sliced", action="store_true", help="leave out the slow reference")
    parser.add_argument(
        "--bucket-log2",
        type=int,
        action="append",
        default=[],
        help="also time StochasticAdamW(bucket=2**N) (repeatable)",
    )
    parser.add_argument("--no-loss", action="store_true", help="time the step only")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()}")
    time_steps(args.rounds, not args.no_sliced, [1 << n for n in args.bucket_log2])
    if not args.no_loss:
        loss_parity()


if __name__ == "__main__":
    main()
