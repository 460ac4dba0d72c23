"""Held-out hazards in values half cannot represent: RoPE positions, Fourier features and
coordinates, an Euler solver's state, a quantiser's distances and a point near the
boundary of the Poincare ball (see :mod:`testbed.heldout`)."""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

from testbed.heldout_base import Built, gen, mlp, seeded

__all__ = ["rope", "nerf", "geo", "euler", "pairs", "Tokenizer"]


# -- positions and coordinates half cannot represent --------------------------------------
class Rotary(nn.Module):
    """RoPE with the angles computed in the activation dtype (early GPT-NeoX and LLaMA
    ports): fp16 rounds positions above 2048 to even numbers, and angles above 4096
    to multiples of 4 radians or more."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, d, 2) / d))

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        inv_freq = self.get_buffer("inv_freq").to(x.dtype)
        angles = positions.to(x.dtype)[..., None] * inv_freq
        cos, sin = angles.cos(), angles.sin()
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class RotaryAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.rotary = Rotary(32)
        self.out = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k = self.rotary(q, positions), self.rotary(k, positions)
        probs = (q @ k.transpose(-1, -2) / math.sqrt(32)).softmax(-1)
        return self.out(probs @ v)


def rope() -> Built:
    def batch(seed: int, low: int, high: int) -> Any:
        g = gen(seed)
        positions = torch.randint(low, high, (2, 16), generator=g).sort(-1).values
        return (torch.randn(2, 16, 32, generator=g), positions)

    batches = [batch(550, 2048, 8192), batch(551, 2048, 8192), batch(552, 8192, 32768)]
    return seeded(RotaryAttention, 37), batches


class FourierEncoding(nn.Module):
    """NeRF's positional encoding, sin(2^k * pi * x) for k < 8, of world coordinates of a
    scene that is not centred at the origin (x around 40)."""

    def __init__(self, octaves: int = 8) -> None:
        super().__init__()
        self.register_buffer("freqs", math.pi * 2.0 ** torch.arange(octaves))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        angles = (x[..., None] * self.get_buffer("freqs").to(x.dtype)).flatten(-2)
        return torch.cat([angles.sin(), angles.cos()], dim=-1)


class RadianceField(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encode = FourierEncoding()
        self.field = mlp(48, 4)

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        return self.field(self.encode(points))


def nerf() -> Built:
    def batch(seed: int, centre: float) -> Any:
        return (centre + torch.rand(64, 3, generator=gen(seed)) * 2.0 - 1.0,)

    return seeded(RadianceField, 38), [batch(560, 40.0), batch(561, 40.0), batch(562, 0.0)]


class GeoScaler(nn.Module):
    """Standardises (latitude, longitude) inside the model with the training set's centre
    and spread (taxi-trip and delivery-time models): New York is 40.75 +- 0.05, and fp16
    steps by 0.03 there."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("centre", torch.tensor([40.75, -73.98]))
        self.register_buffer("spread", torch.tensor([0.05, 0.05]))

    def forward(self, latlon: torch.Tensor) -> torch.Tensor:
        return (latlon - self.get_buffer("centre")) / self.get_buffer("spread")


class TripTime(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pickup = GeoScaler()
        self.head = mlp(4, 1)

    def forward(self, pickup: torch.Tensor, dropoff: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.pickup(pickup), self.pickup(dropoff)], dim=-1))


def geo() -> Built:
    def batch(seed: int, spread: float) -> Any:
        g = gen(seed)
        centre = torch.tensor([40.75, -73.98])
        return tuple(centre + spread * torch.randn(32, 2, generator=g) for _ in range(2))

    return seeded(TripTime, 39), [batch(570, 0.05), batch(571, 0.05), batch(572, 0.5)]


# -- iterative solvers, quantisers, geometry near a boundary ------------------------------
class EulerSolver(nn.Module):
    """A velocity field integrated with 200 explicit Euler steps of dt = 0.005
    (torchdiffeq's "euler" method), returning the displacement x(T) - x(0) as flow-based
    registration does: the median increment (1e-3) is half of fp16's step at the state's
    magnitude (2e-3 around 3), so rounding swallows or doubles it."""

    def __init__(self, steps: int = 200) -> None:
        super().__init__()
        self.f = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 16))
        self.steps = steps

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        dt, x = 1.0 / self.steps, x0
        for _ in range(self.steps):
            x = x + dt * self.f(x)
        return x - x0


def euler() -> Built:
    def batch(seed: int, centre: float) -> Any:
        return (centre + torch.randn(8, 16, generator=gen(seed)),)

    return seeded(EulerSolver, 43), [batch(610, 3.0), batch(611, 3.0), batch(612, 12.0)]


class NearestCode(nn.Module):
    """VQ-VAE's codebook lookup (taming-transformers' VectorQuantizer): argmin of
    |z|^2 - 2 z.c + |c|^2. No parameters and an integer output; with |z|^2 near 1000 half
    steps by 0.5 or more, and the argmin flips between near-equidistant codes."""

    def forward(self, z: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
        d = z.pow(2).sum(-1, keepdim=True) - 2 * z @ codebook.T + codebook.pow(2).sum(-1)
        return d.argmin(-1)


class Tokenizer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = mlp(16, 16)
        self.codebook = nn.Embedding(512, 16)
        self.quantize = NearestCode()
        with torch.no_grad():  # encodings and codes share an uncentred mean, as trained
            cast(nn.Linear, self.encoder[2]).bias.add_(8.0)
            self.codebook.weight.add_(8.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.quantize(self.encoder(x), self.codebook.weight)


class PoincareDistance(nn.Module):
    """The Poincare-ball distance of hyperbolic embeddings (Nickel and Kiela):
    arcosh(1 + 2|u - v|^2 / ((1 - |u|^2)(1 - |v|^2))), with 1 - |u|^2 near 1e-4 at the
    boundary, where half rounds |u|^2 to 1."""

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        gap_u = 1 - u.pow(2).sum(-1)
        gap_v = 1 - v.pow(2).sum(-1)
        return torch.acosh(1 + 2 * (u - v).pow(2).sum(-1) / (gap_u * gap_v))


class HyperbolicEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(256, 8)
        self.distance = PoincareDistance()
        with torch.no_grad():
            w = self.emb.weight
            radius = torch.sqrt(1 - torch.logspace(-4, -2, 256)[torch.randperm(256)])
            w.mul_((radius / w.norm(dim=-1))[:, None])

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        return self.distance(self.emb(pairs[:, 0]), self.emb(pairs[:, 1]))


def pairs() -> Built:
    def batch(seed: int) -> Any:
        return (torch.randint(0, 256, (64, 2), generator=gen(seed)),)

    return seeded(HyperbolicEmbedding, 46), [batch(620), batch(621)]
