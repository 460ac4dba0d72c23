"""The small stand-ins the doc test (tests/test_docs.py) gives the blocks of README.md and
docs/: a model shaped like the encoders the docs name (``encoder.layer.0.attention``), its
example inputs, and the names the Python blocks take as given. Also a MODEL spec for the
CLI (``doc_model.py:build``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + torch.relu(self.attention(x)))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Layer(), Layer()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class DocModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.encoder = Encoder()
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = self.encoder(self.embed(x))
        # the names the docs read: "output", and MiniLM's "sentence_embedding"
        return {"output": self.head(hidden), "sentence_embedding": hidden}


class MyNorm(nn.LayerNorm):
    """A user's own norm type, as a ``keep_fp32`` selector."""


def build() -> nn.Module:
    torch.manual_seed(0)
    return DocModel().eval()


def example_inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(4, 8, generator=gen) for _ in range(3)]


def namespace() -> dict[str, Any]:
    """The names a Python block of the docs uses without defining them."""
    batches = example_inputs()
    return {
        "model": build(),
        "build": build,
        "build_fp32_model": build,
        "inputs": batches,
        "batches": batches,
        "example_batch": batches[0],
        "batch": batches[0],
        "x": batches[0],
        "MyNorm": MyNorm,
    }
