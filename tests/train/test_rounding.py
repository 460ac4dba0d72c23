"""The random bits and the rounding step of stochastic rounding (halfprec.train.rounding)."""

from __future__ import annotations

import math

import torch

from halfprec.train.rounding import random_bits, round_with

_N = 1 << 16


def _bits(first: int, second: int, start: int = 0) -> torch.Tensor:
    counters = torch.arange(start, start + _N, dtype=torch.int32)
    return random_bits(counters, torch.tensor(first, dtype=torch.int32), torch.tensor(second))


def _chi2_bins(values: torch.Tensor, bins: int) -> float:
    """Pearson's chi-square of ``values`` (in [0, bins)) against the uniform distribution."""
    counts = torch.bincount(values.long(), minlength=bins).double()
    expected = values.numel() / bins
    return float(((counts - expected) ** 2 / expected).sum())


def test_each_16_bit_field_of_the_bits_is_uniform_on_consecutive_counters() -> None:
    """The fields the optimizer uses (low and high 16 bits) over 65536 consecutive
    counters, in 256 bins by their top 8 bits: chi-square with 255 degrees of freedom has
    mean 255 and standard deviation 22.6; 370 is 5 standard deviations. The counters
    themselves (no hash) fail it at once, which shows the test can fail."""
    bits = _bits(12345, 678)
    for field in (bits & 0xFFFF, (bits >> 16) & 0xFFFF):
        assert _chi2_bins(field >> 8, 256) < 370
    counters = torch.arange(_N, dtype=torch.int32)
    assert _chi2_bins((counters & 0xFFFF)[: _N // 2] >> 8, 256) > 370


def test_keys_near_each_other_give_unrelated_streams() -> None:
    """Keys one apart, and a stream against itself shifted by one counter: the fields
    agree no more often than chance (1 in 65536), and are uncorrelated."""
    base = _bits(1000, 7) & 0xFFFF
    others = [_bits(1001, 7) & 0xFFFF, _bits(1000, 8) & 0xFFFF, _bits(1000, 7, start=2) & 0xFFFF]
    for other in others:
        assert int((base == other).sum()) <= 8  # expected 1
        a, b = base.double() - base.double().mean(), other.double() - other.double().mean()
        correlation = float((a * b).sum() / (a.norm() * b.norm()))
        assert abs(correlation) < 5 / math.sqrt(_N)


def test_round_with_carries_by_the_lower_bits_and_keeps_specials() -> None:
    one = torch.tensor([1.0 + 2**-8])  # halfway between bf16 1.0 and 1.0078125
    low_bits = int(one.view(torch.int32)) & 0xFFFF  # 0x8000
    assert low_bits == 0x8000
    just_below = torch.tensor([0x8000 - 1], dtype=torch.int32)
    assert float(round_with(one, just_below)) == 1.0  # no carry
    assert float(round_with(one, just_below + 1)) == 1.0078125  # carries
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 3.4e38])
    most = torch.full((6,), 0xFFFF, dtype=torch.int32)
    got = round_with(specials, most)
    assert torch.equal(got[:4].view(torch.int32), specials[:4].view(torch.int32))
    assert got[4].isnan() and got[5] == math.inf  # above bf16's largest: up to inf
    truncated = round_with(specials, torch.zeros(6, dtype=torch.int32))[5]
    assert float(truncated) == float(torch.finfo(torch.bfloat16).max)  # no carry: down
