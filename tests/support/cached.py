"""A module that caches a derived tensor, as LeViT's attention-bias cache does."""

from __future__ import annotations

import torch
from torch import nn


class CachedProjection(nn.Module):
    """Caches a derived tensor (LeViT's attention-bias cache) and drops it in ``_apply``."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 8))
        self.norm = nn.LayerNorm(8)
        self.cache: dict[str, torch.Tensor] = {}

    def derived(self) -> torch.Tensor:
        if "w" not in self.cache:
            self.cache["w"] = self.table.t().contiguous()
        return self.cache["w"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x @ self.derived())

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        self.cache = {}
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True) -> CachedProjection:
        self.cache = {}  # LeViT also drops the cache on every mode switch
        return super().train(mode)
