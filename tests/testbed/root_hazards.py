"""Hazards written inline in the ROOT module's own forward, where no submodule island helps.

Each :class:`RootHazard` names the op a diagnosis must blame (``op``, in ``culprit``) and
marks its source line with a ``# <- hazard`` comment. A module-level fp32 island would have
to be the whole model; an op island (or a saturated fill) fixes each at almost no cost.
Used by tests/integration/test_op_islands.py and benchmarks/op_islands.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from testbed.hazards import Hazard

__all__ = ["RootHazard", "ROOT_HAZARDS"]

D = 64
WIDTH = 1024


@dataclass(frozen=True)
class RootHazard(Hazard):
    """A :class:`Hazard` whose ``culprit`` module (the root: "") breaks in op ``op``."""

    op: str = ""


def _body(d_in: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, WIDTH), nn.GELU(), nn.Linear(WIDTH, D))


def _floats(shape: tuple[int, ...], n: int = 2, scale: float = 1.0) -> list[Any]:
    return [
        (torch.randn(*shape, generator=torch.Generator().manual_seed(400 + i)) * scale,)
        for i in range(n)
    ]


class MaskedRoot(nn.Module):
    """Attention scores masked with a constant beyond fp16, inline in the root."""

    def __init__(self, fill: float) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.body = _body(D)
        self.fill = fill

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
        scores = scores.masked_fill(mask[:, None, :] == 0, self.fill)  # <- hazard
        return self.body(scores.softmax(-1) @ v)


def _masked(fill: float) -> Callable[[], tuple[nn.Module, list[Any]]]:
    def build() -> tuple[nn.Module, list[Any]]:
        torch.manual_seed(20)
        batches = []
        for (x,) in _floats((4, 10, D)):
            mask = torch.ones(4, 10, dtype=torch.long)
            mask[1::2, 6:] = 0
            batches.append((x, mask))
        return MaskedRoot(fill).eval(), batches

    return build


class ScaledRoot(nn.Module):
    """An intermediate scaled to ~1e5 and back down (a gain folded into an activation)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(D, D)
        self.body = _body(D)
        self.gain = 1e5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x) * self.gain  # <- hazard
        return self.body(torch.tanh(h / self.gain))


class EpsRoot(nn.Module):
    """Standardises raw rows with eps=1e-12 (0 in fp16); padded rows are constant."""

    def __init__(self) -> None:
        super().__init__()
        self.body = _body(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        x = (x - mu) / torch.sqrt(var + 1e-12)  # <- hazard
        return self.body(x)


def _eps() -> tuple[nn.Module, list[Any]]:
    torch.manual_seed(22)
    batches = _floats((6, 5, 32))
    for (x,) in batches:
        x[:, -2:] = 0.5
    return EpsRoot().eval(), batches


class ExpSoftmaxRoot(nn.Module):
    """A hand-written softmax, exp(x) / sum(exp(x)), on logits above 12: exp overflows."""

    def __init__(self) -> None:
        super().__init__()
        self.body = _body(D)
        self.head = nn.Linear(D, 50)
        with torch.no_grad():
            self.head.weight.mul_(60.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(self.head(self.body(x)))  # <- hazard
        return e / e.sum(-1, keepdim=True)


class Stem(nn.Module):
    """A convolution whose outputs reach ~1e5 (realistic wav2vec2-like feature scales)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 16, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.mul_(3e4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class TransposeRoot(nn.Module):
    """The out-of-range stem output crosses a transpose in the parent, then a LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = Stem()
        self.norm = nn.LayerNorm(16)
        self.body = _body(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x).transpose(1, 2)
        return self.body(self.norm(h))


def _seeded(cls: Callable[[], nn.Module], shape: tuple[int, ...], seed: int) -> Any:
    def build() -> tuple[nn.Module, list[Any]]:
        torch.manual_seed(seed)
        return cls().eval(), _floats(shape)

    return build


ROOT_HAZARDS: dict[str, RootHazard] = {
    h.name: h
    for h in (
        RootHazard("root-fill-1e9", "masked_fill(mask, -1e9)", _masked(-1e9), "", op="masked_fill"),
        RootHazard(
            "root-fill-finfo-min",
            "masked_fill(mask, finfo(float32).min)",
            _masked(torch.finfo(torch.float32).min),
            "",
            op="masked_fill",
        ),
        RootHazard(
            "root-scaled-1e5",
            "x * 1e5 then / 1e5",
            _seeded(ScaledRoot, (8, D), 21),
            "",
            op="mul",
        ),
        RootHazard("root-eps-1e-12", "x / torch.sqrt(var + 1e-12)", _eps, "", op="add"),
        RootHazard(
            "root-exp-softmax",
            "exp(x) / exp(x).sum()",
            _seeded(ExpSoftmaxRoot, (8, D), 23),
            "",
            op="exp",
        ),
        RootHazard(
            "transpose-in-parent",
            "conv output beyond fp16, transposed in the parent's forward",
            _seeded(TransposeRoot, (4, 4, 24), 24),
            "stem.conv",
            op="conv1d",
        ),
    )
}


# -- factories for the command line (MODEL = .../root_hazards.py:exp_softmax_model) -----------
def exp_softmax_model() -> nn.Module:
    return ROOT_HAZARDS["root-exp-softmax"].build()[0]


def exp_softmax_model_example_inputs() -> list[Any]:
    return ROOT_HAZARDS["root-exp-softmax"].build()[1]
