"""Autocast's weight casts kept across the micro-batches of one step (``StepCastCache``)."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from halfprec.train import MixedPrecision, TrainConfig

MICRO = 3


class _WeightCasts(TorchDispatchMode):
    """Counts fp32 -> half conversions of the given parameters."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        super().__init__()
        self.pointers, self.count = {p.data_ptr() for p in params}, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._to_copy.default and args[0].data_ptr() in self.pointers:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.Linear(32, 4))


def _micro_batch(step: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 * step + i)
    return torch.randn(6, 8, generator=gen), torch.randint(0, 4, (6,), generator=gen)


def _train(model: nn.Module, cached: bool, steps: int) -> tuple[list[float], int]:
    """``steps`` steps of MICRO micro-batches; ``cached=False`` is torch.amp's own recipe
    (a fresh autocast region, so fresh casts, per micro-batch). Returns losses and casts."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mp = MixedPrecision("bf16", "cpu", TrainConfig(accumulation_steps=MICRO))
    losses, casts = [], _WeightCasts(list(model.parameters()))
    for step in range(steps):
        for i in range(MICRO):
            x, y = _micro_batch(step, i)
            region = mp.autocast() if cached else torch.autocast("cpu", torch.bfloat16)
            with casts, region:
                loss = nn.functional.cross_entropy(model(x).float(), y)
            losses.append(loss.item())
            mp.backward(loss)
        assert mp.step(optimizer).applied
    return losses, casts.count


def test_each_weight_is_cast_once_per_step_not_once_per_micro_batch() -> None:
    weights = 6  # three Linear layers' weights and biases
    _, per_micro_batch = _train(_net(), cached=False, steps=2)
    _, per_step = _train(_net(), cached=True, steps=2)
    assert per_micro_batch == 2 * MICRO * weights
    assert per_step == 2 * weights  # cast again after each step: the weights changed


def test_training_with_the_kept_casts_is_bit_identical_to_fresh_casts() -> None:
    fresh, cached = _net(), _net()
    want, _ = _train(fresh, cached=False, steps=3)
    got, _ = _train(cached, cached=True, steps=3)
    assert got == want
    for a, b in zip(cached.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_cache_is_released_at_the_step_and_leaves_no_nesting() -> None:
    model = _net()
    _train(model, cached=True, steps=1)
    probe = copy.deepcopy(model)
    with torch.autocast("cpu", torch.bfloat16):
        probe(torch.ones(1, 8))
    # had a level stayed held, this region's exit would not clear and a later region
    # would reuse a stale copy of the changed weight
    with torch.no_grad():
        probe[0].weight.add_(1.0)
    with _WeightCasts([probe[0].weight]) as casts, torch.autocast("cpu", torch.bfloat16):
        probe(torch.ones(1, 8))
    assert casts.count == 1
    assert torch.autocast_increment_nesting() == 1  # nothing else holds a level
    torch.autocast_decrement_nesting()


def test_a_run_dropped_in_the_middle_of_accumulation_gives_the_level_back() -> None:
    model = _net()
    mp = MixedPrecision("bf16", "cpu", TrainConfig(accumulation_steps=2))
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(torch.ones(2, 8)), torch.tensor([0, 1]))
    mp.backward(loss)
    del mp  # never stepped
    assert torch.autocast_increment_nesting() == 1
    torch.autocast_decrement_nesting()
