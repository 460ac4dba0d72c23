"""A parameter of ``forward`` is half unless every holder of the module passes a value not
known as half and casts the module's result (see :mod:`halfprec.leaks.lint.holders`).
``torch.gather(mask, 1, index=ids)`` hands ``mask``'s values on (its ``index`` is an integer
use). Each model here is small and written for this test."""

from __future__ import annotations

import textwrap

import pytest
import torch

from halfprec.leaks.lint import lint_source

_MODELS = """\
import math

import torch
from torch import nn


class TimeEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, t):
        freqs = torch.exp(torch.arange(self.dim // 2, device=t.device) * -math.log(1e4))
        angles = t[:, None] * freqs[None, :]
        return torch.cat((angles.sin(), angles.cos()), dim=-1)


class Head(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.embed = TimeEmbedding(dim)
        self.proj = nn.Linear(dim, dim)

    def draw(self, n, device):
        u = torch.distributions.Beta(2.0, 2.0).sample((n,)).to(device)
        return 1.0 - u

    def forward(self, x):
        t = self.draw(x.shape[0], x.device)
        emb = self.embed(t)
        emb = emb.to(dtype=self.proj.weight.dtype)
        return self.proj(x + emb)
"""


def _lines(source: str) -> list[int]:
    return [f.line for f in lint_source(textwrap.dedent(source)) if f.code == "HP101"]


def test_times_embedded_by_a_module_every_holder_feeds_fp32_and_casts_stay_silent() -> None:
    assert _lines(_MODELS) == []


def test_the_same_module_whose_holder_uses_the_result_uncast_leaks() -> None:
    uncast = _MODELS.replace("        emb = emb.to(dtype=self.proj.weight.dtype)\n", "")
    assert _lines(uncast) == [13]


def test_the_same_module_fed_the_half_activations_leaks() -> None:
    fed_half = _MODELS.replace("emb = self.embed(t)", "emb = self.embed(x[:, 0])")
    assert _lines(fed_half) == [13]


def test_a_module_no_holder_of_its_file_calls_keeps_its_input_half() -> None:
    alone = _MODELS[: _MODELS.index("class Head")]
    assert _lines(alone) == [13]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_promotion_behind_the_rule(dtype: torch.dtype) -> None:
    t = torch.rand(3)
    freqs = torch.exp(torch.arange(4) * -1.0)
    assert (t[:, None] * freqs[None, :]).dtype == torch.float32
    assert (t.to(dtype)[:, None] * freqs[None, :]).dtype == torch.float32


_MASKER = """\
import torch
from torch import nn


class Masker(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x, keep: int):
        b, n, _ = x.shape
        ids_restore = torch.argsort(torch.rand(b, n, device=x.device), dim=1)
        mask = torch.ones([b, n], device=x.device)
        mask[:, :keep] = 0
        mask = torch.gather(mask, dim=1, index=ids_restore)
        return self.proj(x), mask
"""


def test_a_mask_unshuffled_by_gather_is_followed_to_the_output() -> None:
    assert _lines(_MASKER) == [13]


def test_a_tensor_used_only_as_the_index_of_gather_stays_silent() -> None:
    index_only = _MASKER.replace(
        "mask = torch.gather(mask, dim=1, index=ids_restore)",
        "mask = torch.gather(x[..., 0], dim=1, index=ids_restore)",
    ).replace("mask[:, :keep] = 0\n", "")
    index_only = index_only.replace("mask = torch.ones([b, n], device=x.device)\n", "")
    assert _lines(index_only) == []
