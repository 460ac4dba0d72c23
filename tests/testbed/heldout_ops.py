"""Held-out hazards in ops with no half kernel or no half meaning: torch.linalg.solve,
torch.fft with complex weights and torch.cdist (see :mod:`testbed.heldout`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from testbed.heldout_base import Built, gen, mlp, seeded

__all__ = ["ridge", "fno", "protonet"]


# -- ops with no half kernel or no half meaning ------------------------------------------
class RidgeHead(nn.Module):
    """The closed-form ridge-regression head of few-shot learners (R2D2, MetaOptNet):
    W = S^T (S S^T + lambda I)^-1 Y, with torch.linalg.solve (no half kernel)."""

    def __init__(self, lam: float = 1.0) -> None:
        super().__init__()
        self.lam = lam

    def forward(self, support: torch.Tensor, labels: torch.Tensor, query: torch.Tensor) -> Any:
        eye = torch.eye(support.shape[0], dtype=support.dtype, device=support.device)
        alpha = torch.linalg.solve(support @ support.T + self.lam * eye, labels)
        return query @ (support.T @ alpha)


class FewShot(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = mlp(16, 16)
        self.head = RidgeHead()

    def forward(self, support: torch.Tensor, labels: torch.Tensor, query: torch.Tensor) -> Any:
        return self.head(self.embed(support), labels.to(support.dtype), self.embed(query))


def ridge() -> Built:
    def batch(seed: int) -> Any:
        g = gen(seed)
        labels = nn.functional.one_hot(torch.arange(10) % 5, 5)
        return (torch.randn(10, 16, generator=g), labels, torch.randn(15, 16, generator=g))

    return seeded(FewShot, 40), [batch(580), batch(581)]


class SpectralConv(nn.Module):
    """The Fourier Neural Operator's spectral convolution: rfft, multiply the lowest modes
    by complex weights (a cfloat parameter), irfft, on a grid of 100 points (FNO's Darcy
    grids, 85 and 421 points, are no powers of two either). torch.fft has no CPU half
    kernel, and CUDA's takes only powers of two; ``.to(torch.float16)`` turns the complex
    weights real, dropping the imaginary part."""

    def __init__(self, channels: int, modes: int) -> None:
        super().__init__()
        self.modes = modes
        scale = 1.0 / (channels * channels)
        self.weight = nn.Parameter(
            scale * torch.randn(channels, channels, modes, dtype=torch.cfloat)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spectrum = torch.fft.rfft(x)
        out = torch.zeros_like(spectrum)
        out[..., : self.modes] = torch.einsum(
            "bim,iom->bom", spectrum[..., : self.modes], self.weight
        )
        return torch.fft.irfft(out, n=x.shape[-1])


class NeuralOperator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lift = nn.Conv1d(2, 16, 1)
        self.spectral = SpectralConv(16, 12)
        self.skip = nn.Conv1d(16, 16, 1)
        self.project = nn.Conv1d(16, 1, 1)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        h = self.lift(u)
        return self.project(nn.functional.gelu(self.spectral(h) + self.skip(h)))


def fno() -> Built:
    def batch(seed: int) -> Any:
        grid = torch.linspace(0, 1, 100).expand(4, 1, 100)
        return (torch.cat([torch.randn(4, 1, 100, generator=gen(seed)), grid], dim=1),)

    return seeded(NeuralOperator, 41), [batch(590), batch(591)]


class PrototypeDistance(nn.Module):
    """Prototypical networks' logits, -torch.cdist(query, prototypes) (no half kernel)."""

    def forward(self, query: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
        return -torch.cdist(query, prototypes)


class ProtoNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = mlp(16, 16)
        self.distance = PrototypeDistance()

    def forward(self, support: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        prototypes = self.embed(support).reshape(5, 4, 16).mean(1)
        return self.distance(self.embed(query), prototypes)


def protonet() -> Built:
    def batch(seed: int) -> Any:
        g = gen(seed)
        return (torch.randn(20, 16, generator=g), torch.randn(12, 16, generator=g))

    return seeded(ProtoNet, 42), [batch(600), batch(601)]
