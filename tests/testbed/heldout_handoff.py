"""A held-out hazard at a hand-off between sibling modules (see :mod:`testbed.heldout`):
a value that fits the half dtype, but whose half rounding destroys what the next module
computes from it, inside a block whose large Linears make an fp32 block expensive."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from testbed.heldout_base import Built, gen, seeded

__all__ = ["ponder"]


class Halting(nn.Module):
    """PonderNet's halting node (Banino et al. 2021; ``self.halt_node = nn.Sequential(
    nn.Linear(n_embeddings, 1), nn.Sigmoid())`` in PyTorch ports of it): lambda_n, the
    probability of halting at step n. A confident node gives up to 0.9999, which fits
    fp16 and bf16 but rounds to 1.0 in both."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.logit = nn.Linear(d, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logit(h))


class Continuing(nn.Module):
    """log(1 - lambda_n): the step's factor of the un-halted probability prod_{j<n}
    (1 - lambda_j), which PonderNet ports compute as ``torch.cumprod(1 - ps, dim)`` (an
    exclusive cumprod), here summed in log space so that it does not underflow over many
    steps. From a half lambda_n rounded to 1.0 it is -inf where fp32 gives about -10."""

    def forward(self, halt: torch.Tensor) -> torch.Tensor:
        return torch.log(1 - halt)


class PonderStep(nn.Module):
    """One step of the step function s(x, h_n) -> (h_n+1, lambda_n): a residual MLP (the
    block's large Linears), the halting node and the un-halted log-probability."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.cell = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.halt = Halting(d)
        self.going = Continuing()

    def forward(self, h: torch.Tensor, log_unhalted: torch.Tensor) -> Any:
        h = h + self.cell(h)
        halt = self.halt(h)
        return h, log_unhalted + torch.log(halt), log_unhalted + self.going(halt)


class Ponder(nn.Module):
    """Three ponder steps; the output is log p_n, the log-probability of halting at each
    step (PonderNet's p_n = lambda_n * prod_{j<n} (1 - lambda_j))."""

    def __init__(self, d: int = 64, steps: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(16, d)
        self.step = PonderStep(d)
        self.steps = steps
        with torch.no_grad():
            self.step.halt.logit.weight.mul_(0.5)
            self.step.halt.logit.bias.fill_(9.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        log_unhalted = torch.zeros_like(h[:, :1])
        log_p = []
        for _ in range(self.steps):
            h, log_halt, log_unhalted = self.step(h, log_unhalted)
            log_p.append(log_halt)
        return torch.cat(log_p, dim=-1)


def ponder() -> Built:
    def batch(seed: int, scale: float) -> Any:
        return (scale * torch.randn(32, 16, generator=gen(seed)),)

    return seeded(Ponder, 48), [batch(630, 1.0), batch(631, 1.0), batch(632, 2.0)]
