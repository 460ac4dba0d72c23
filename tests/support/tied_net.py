"""A model with tied weights, a norm island, BatchNorm statistics and a non-persistent buffer;
also the MODEL spec ``tests/support/tied_net.py:build``."""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    """Tied weights, a norm island, BatchNorm stats, and a non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.body = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("offset", torch.arange(8.0) / 8, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.offset
        x = self.norm(torch.relu(self.body(x)))
        return self.head(self.bn(x.transpose(1, 2)).transpose(1, 2))


def trained() -> Net:
    torch.manual_seed(0)
    net = Net()
    net.train()
    net(torch.randint(0, 10, (4, 5)))  # BatchNorm running statistics
    return net.eval()


def build() -> Net:
    return Net()
