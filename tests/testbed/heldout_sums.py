"""Held-out hazards in reductions, accumulations and learned scales: one-pass variance,
long sums and cumulative sums, log-sum-exp without the max, a Gram matrix, an entropy and a
collapsed temperature (see :mod:`testbed.heldout`)."""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

from testbed.heldout_base import Built, gen, mlp, seeded

__all__ = [
    "variance",
    "long_sum",
    "cumsum",
    "lse",
    "gram",
    "photodiode",
    "ConfidentClassifier",
    "ClusterAssigner",
]


# -- overflow and underflow in reductions and accumulations ------------------------------
class OnePassStandardize(nn.Module):
    """var = E[x^2] - E[x]^2 in one pass (a "fast" hand-written feature scaler): x^2 of
    readings around 40 loses the variance to cancellation, and overflows at 400."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean
        return (x - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class Readings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = OnePassStandardize(64)
        self.head = mlp(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.scale(x))


def variance() -> Built:
    def batch(seed: int, centre: float, spread: float) -> Any:
        return (centre + spread * torch.randn(8, 64, generator=gen(seed)),)

    return seeded(Readings, 31), [
        batch(500, 40.0, 1.0),
        batch(501, 40.0, 1.0),
        batch(502, 400.0, 10.0),
    ]


class MeanPooling(nn.Module):
    """sentence-transformers' masked mean pooling, sum(h * mask) / sum(mask): the sum over
    a long document of a channel around 30 passes 65504 before the division."""

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask[..., None].to(h.dtype)
        return (h * m).sum(1) / m.sum(1)


class DocumentEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.pool = MeanPooling()
        self.head = nn.Linear(16, 8)
        with torch.no_grad():
            self.proj.bias[:4] = 30.0  # a "massive activation" channel, as in real encoders

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.proj(x), mask))


def long_sum() -> Built:
    def batch(seed: int, length: int) -> Any:
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, length // 2 :] = 0
        return (torch.randn(2, length, 16, generator=gen(seed)), mask)

    return seeded(DocumentEncoder, 32), [batch(510, 4096), batch(511, 4096), batch(512, 8192)]


class BoxFilter(nn.Module):
    """A running-sum box filter, (cumsum[t + w] - cumsum[t]) / w, as in guided-filter
    code: the cumulative sum over 4096 steps keeps too few bits for a window of 4."""

    def __init__(self, window: int = 4) -> None:
        super().__init__()
        self.window = window

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.cumsum(-1)
        return (c[..., self.window :] - c[..., : -self.window]) / self.window


class Envelope(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Conv1d(4, 4, 1)
        self.box = BoxFilter()
        self.out = nn.Conv1d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.box(self.inp(x).abs()))


def cumsum() -> Built:
    def batch(seed: int, length: int) -> Any:
        return (torch.randn(2, 4, length, generator=gen(seed)),)

    return seeded(Envelope, 33), [batch(520, 4096), batch(521, 4096), batch(522, 16384)]


class LSEPool(nn.Module):
    """Log-sum-exp pooling, log(sum(exp(r * x))) / r (weakly supervised localisation,
    multiple-instance learning) written without subtracting the max: exp(r * x) overflows."""

    def __init__(self, sharpness: float = 10.0) -> None:
        super().__init__()
        self.r = sharpness

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.exp(self.r * x).sum(-1)) / self.r


class InstanceScorer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.score = mlp(16, 4)
        self.pool = LSEPool()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.score(x).transpose(1, 2))


def lse() -> Built:
    def batch(seed: int, scale: float) -> Any:
        return (scale * torch.randn(4, 32, 16, generator=gen(seed)),)

    return seeded(InstanceScorer, 34), [batch(530, 3.0), batch(531, 3.0), batch(532, 6.0)]


class Gram(nn.Module):
    """Neural style transfer's Gram matrix, (F @ F^T) / (C * H * W): the products of 1024
    positions overflow before the division."""

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        b, c, h, w = f.shape
        flat = f.reshape(b, c, h * w)
        return flat @ flat.transpose(1, 2) / (c * h * w)


class StyleFeatures(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.gram = Gram()
        with torch.no_grad():
            self.conv.weight.mul_(12.0)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.gram(torch.relu(self.conv(image)))


def gram() -> Built:
    def batch(seed: int, size: int) -> Any:
        return (torch.rand(2, 3, size, size, generator=gen(seed)) * 2.0,)

    return seeded(StyleFeatures, 35), [batch(540, 32), batch(541, 32), batch(542, 64)]


class PredictiveEntropy(nn.Module):
    """Entropy of the predicted distribution, -sum(p * log p) (active learning, MoE router
    entropy): probabilities below 6e-8 are 0 in fp16, and 0 * log(0) is NaN."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        p = logits.softmax(-1)
        return -(p * p.log()).sum(-1)


class ConfidentClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.logits = mlp(16, 32)
        self.entropy = PredictiveEntropy()
        with torch.no_grad():
            cast(nn.Linear, self.logits[2]).weight.mul_(30.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.entropy(self.logits(x))


# -- large learned scales and temperatures ------------------------------------------------
class PrototypeHead(nn.Module):
    """Cosine similarity to learned prototypes that sit close together, over a learned
    temperature that training drove to 1e-3 (CLIP clamps its logit scale at 100 against
    exactly this): the cosines of one row differ by about 0.01, while fp16 steps by up to
    2.4e-4 there, i.e. by 0.24 in logits that differ by about 10."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.prototypes = nn.Parameter(torch.randn(d) + 0.01 * torch.randn(k, d))
        self.log_temperature = nn.Parameter(torch.tensor(math.log(1e-3)))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = z / z.pow(2).sum(-1, keepdim=True).sqrt()
        c = self.prototypes / self.prototypes.pow(2).sum(-1, keepdim=True).sqrt()
        return (z @ c.T / self.log_temperature.exp()).softmax(-1)


class ClusterAssigner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = mlp(16, 16)
        self.head = PrototypeHead(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


class LearnedScale(nn.Module):
    """A learned per-channel input scale, initialised from the data's spread, on readings
    in SI units (photodiode currents near 1e-6 A): the scale, 1e6, is beyond fp16's range
    (inf after ``.half()``). convert's defaults keep a module whose parameters do not fit
    fp16 in fp32, so this one is prevented by convert."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((d,), 1e6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


class Photodiode(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = LearnedScale(8)
        self.head = mlp(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.scale(x))


def photodiode() -> Built:
    def batch(seed: int, unit: float) -> Any:
        return (unit * torch.randn(16, 8, generator=gen(seed)),)

    return seeded(Photodiode, 48), [batch(630, 1e-6), batch(631, 1e-6), batch(632, 1e-5)]
