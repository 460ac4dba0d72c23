"""Shared pieces of the held-out hazard models (:mod:`testbed.heldout`): seeded
generators, a small MLP and seeded builders."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["Built", "gen", "mlp", "seeded", "floats"]

Built = tuple[nn.Module, list[Any]]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mlp(d_in: int, d_out: int, width: int = 64) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, width), nn.GELU(), nn.Linear(width, d_out))


def seeded(cls: Callable[[], nn.Module], seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return cls().eval()


def floats(
    cls: Callable[[], nn.Module], seed: int, shape: tuple[int, ...], scales: tuple[float, ...]
) -> Callable[[], Built]:
    """A builder of ``cls`` with one batch of ``shape`` per scale (a changed last scale is
    the different-range batch)."""

    def build() -> Built:
        model = seeded(cls, seed)
        return model, [
            (s * torch.randn(*shape, generator=gen(10 * seed + i)),) for i, s in enumerate(scales)
        ]

    return build
