"""Stochastic rounding to bf16 with counter-based random bits.

A value rounds to bf16 by keeping the upper 16 bits of its fp32 pattern. Adding 16 random
bits to the lower 16 first carries into the kept half with probability (lower bits) /
2**16, so the result is the bf16 neighbour above with the probability that makes it right
on average ("Revisiting BFloat16 Training"; torchao's ``_fp32_to_bf16_sr`` does the same).

The random bits are a keyed hash of each element's place (:func:`random_bits`): integer
arithmetic only, so that one fused kernel makes them while it reads the values, the bits
are the same eager or compiled, on any device and thread count, and a (key, place) pair
always gives the same bits. Nothing here reads or advances torch's random state.
"""

from __future__ import annotations

import torch

KEY_LIMIT = 1 << 31  # keys are in [0, KEY_LIMIT): int32 and non-negative
_LOW16 = 0xFFFF
_MIX = 0x45D9F3B  # the multiplier of a well-tested 32-bit integer hash (two rounds)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash of int32 ``x`` (xor-shift, multiply, twice). The
    products wrap modulo 2**32 as int32 arithmetic does on every torch backend; the right
    shifts are masked so that they act as unsigned ones."""
    x = (((x >> 16) & _LOW16) ^ x) * _MIX
    x = (((x >> 16) & _LOW16) ^ x) * _MIX
    return ((x >> 16) & _LOW16) ^ x


def random_bits(counters: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """32 random-looking bits (as int32) for each of ``counters`` (int32, non-negative):
    the hash of the counter keyed by ``first``, hashed again keyed by ``second`` (int32
    keys in [0, :data:`KEY_LIMIT`), tensors so that a compiled caller does not recompile
    for each key). Two keys that differ give unrelated streams, whatever their distance."""
    return _mix(_mix(counters ^ first) ^ second)


def round_with(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """fp32 ``x`` rounded to bf16 values (returned as fp32, exactly bf16) by adding
    ``bits`` (int32 in [0, 2**16)) to each value's lower 16 bits and dropping them.

    Zeros keep their sign (the carry never crosses it), inf stays inf (its lower bits are
    zero and a carry only sets bits that are dropped), a finite value above bf16's largest
    rounds to inf with the right probability, and NaN stays NaN (put back by a minimum and
    a maximum, which carry NaN: cheaper than a mask and a select in eager torch)."""
    rounded = ((x.view(torch.int32) + bits) & -65536).view(torch.float32)
    return torch.maximum(rounded, torch.minimum(x, rounded))  # NaN where x is, else rounded


def round_stochastic(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` (fp32) rounded to bf16, up or down at random with the probability that makes
    the result right on average. inf and NaN stay as they are. ``generator``: draws the two
    keys of the random bits (default torch's global one); the same generator state gives
    the same result."""
    if x.dtype != torch.float32:
        raise ValueError(f"round_stochastic(x) needs an fp32 tensor, got {x.dtype}; pass x.float()")
    device = generator.device if generator is not None else x.device
    keys = torch.randint(0, KEY_LIMIT, (2,), generator=generator, device=device)
    first, second = keys.to(device=x.device, dtype=torch.int32).unbind()
    flat = x.reshape(-1)
    counters = torch.arange(flat.numel(), device=x.device, dtype=torch.int32)
    bits = random_bits(counters, first, second) & _LOW16
    return round_with(flat, bits).to(torch.bfloat16).view(x.shape)
