"""Master-weight mode: half parameters, fp32 masters, fp32 update, fp32 accumulation."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from halfprec.train import MixedPrecision, TrainConfig, load_checkpoint, save_checkpoint
from halfprec.train.config import TrainingStateError


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 4))


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(16, 8, generator=gen), torch.randint(0, 4, (16,), generator=gen)


def _loss(mp: MixedPrecision, model: nn.Module, seed: int) -> torch.Tensor:
    x, y = _batch(seed)
    with mp.autocast():
        return nn.functional.cross_entropy(model(x), y)


class _Casts(TorchDispatchMode):
    """Counts dtype conversions (``aten._to_copy``) of the given parameters."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        super().__init__()
        self.pointers, self.count = {p.data_ptr() for p in params}, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._to_copy.default and args[0].data_ptr() in self.pointers:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_parameters_are_cast_once_and_the_optimizer_holds_fp32_masters(dtype: str) -> None:
    model = _net()
    original = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mp = MixedPrecision(dtype, "cpu")
    mp.use_master_weights(model, optimizer)
    assert mp.master_weights
    masters = optimizer.param_groups[0]["params"]
    assert {p.dtype for p in model.parameters()} == {mp.dtype}
    assert {m.dtype for m in masters} == {torch.float32}
    for master, (name, param) in zip(masters, model.named_parameters(), strict=True):
        assert torch.equal(master, original[name])  # the masters are the fp32 weights
        assert torch.equal(param, original[name].to(mp.dtype))
    assert mp.model_state_dict(model).keys() == original.keys()
    for name, value in mp.model_state_dict(model).items():
        assert torch.equal(value, original[name])


def test_forward_casts_no_weight_where_autocast_casts_every_one() -> None:
    counts = {}
    for masters in (False, True):
        model = _net()
        optimizer = torch.optim.AdamW(model.parameters())
        mp = MixedPrecision("bf16", "cpu")
        if masters:
            mp.use_master_weights(model, optimizer)
        with _Casts(list(model.parameters())) as casts:
            _loss(mp, model, 0)
        counts[masters] = casts.count
    assert counts == {False: 4, True: 0}  # the two Linear layers' weights and biases


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_step_is_adamw_in_fp32_on_the_masters_then_rounded_into_the_parameters(
    dtype: str,
) -> None:
    model = _net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    mp = MixedPrecision(dtype, "cpu", TrainConfig(init_scale=1.0))
    mp.use_master_weights(model, optimizer)
    twin = copy.deepcopy(model)  # the same half weights, to get the same half gradients
    reference = [m.detach().clone() for m in optimizer.param_groups[0]["params"]]
    ref_opt = torch.optim.AdamW(reference, lr=1e-2, weight_decay=0.1)
    for step in range(3):
        mp.backward(_loss(mp, model, step))
        assert mp.step(optimizer).applied
        twin.zero_grad()
        _loss(mp, twin, step).backward()
        for ref, param in zip(reference, twin.parameters(), strict=True):
            ref.grad = param.grad.float()  # type: ignore[union-attr]
        ref_opt.step()
        with torch.no_grad():
            for ref, param in zip(reference, twin.parameters(), strict=True):
                param.copy_(ref)
        for ref, master in zip(reference, optimizer.param_groups[0]["params"], strict=True):
            assert torch.equal(master, ref)
        for ref, param in zip(reference, model.parameters(), strict=True):
            assert torch.equal(param, ref.to(mp.dtype))


def test_micro_batches_accumulate_in_fp32_on_the_masters() -> None:
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    mp = MixedPrecision("bf16", "cpu", TrainConfig(accumulation_steps=2, zero_grad=False))
    mp.use_master_weights(model, optimizer)
    twin = copy.deepcopy(model)
    halves = []
    for seed in (0, 1):
        twin.zero_grad()
        (_loss(mp, twin, seed) / 2).backward()
        halves.append([p.grad.clone() for p in twin.parameters()])  # type: ignore[union-attr]
    for seed in (0, 1):
        mp.backward(_loss(mp, model, seed))
    assert mp.step(optimizer).applied
    assert all(p.grad is None for p in model.parameters())  # the half gradients are dropped
    masters = optimizer.param_groups[0]["params"]
    for master, first, second in zip(masters, *halves, strict=True):
        assert master.grad.dtype == torch.float32
        assert torch.equal(master.grad, first.float() + second.float())
    # summed in bf16 instead, some gradient would have lost bits
    pairs = zip(*halves, strict=True)
    assert any(not torch.equal((a + b).float(), a.float() + b.float()) for a, b in pairs)


def test_an_fp16_overflow_skips_and_leaves_masters_and_parameters_unchanged() -> None:
    model = _net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mp = MixedPrecision("fp16", "cpu", TrainConfig(max_consecutive_skips=2))
    mp.use_master_weights(model, optimizer)
    mp.watch(model, activations=False)
    mp.backward(_loss(mp, model, 0))
    assert mp.step(optimizer).applied
    masters = [m.detach().clone() for m in optimizer.param_groups[0]["params"]]
    params = [p.detach().clone() for p in model.parameters()]
    moments = copy.deepcopy(optimizer.state_dict()["state"])
    mp.backward(_loss(mp, model, 1) * math.inf)
    outcome = mp.step(optimizer)
    assert outcome.skipped and outcome.scale_after == outcome.scale_before / 2
    now = optimizer.param_groups[0]["params"]
    assert all(torch.equal(a, b) for a, b in zip(masters, now, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(params, model.parameters(), strict=True))
    for index, state in optimizer.state_dict()["state"].items():
        assert all(torch.equal(v, moments[index][k]) for k, v in state.items())
    mp.backward(_loss(mp, model, 2) * math.inf)
    with pytest.raises(Exception, match=r"3\.bias|3\.weight"):  # named as the model's parameter
        mp.step(optimizer)


def test_an_amp_checkpoint_resumes_in_master_mode_and_the_other_way(tmp_path: Path) -> None:
    model = _net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mp = MixedPrecision("bf16", "cpu")
    mp.backward(_loss(mp, model, 0))
    mp.step(optimizer)
    save_checkpoint(tmp_path / "amp.st", model, optimizer, mp=mp)
    fresh = _net(seed=1)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    fresh_mp = MixedPrecision("bf16", "cpu")
    fresh_mp.use_master_weights(fresh, fresh_opt)
    load_checkpoint(tmp_path / "amp.st", fresh, fresh_opt, mp=fresh_mp)
    for name, value in fresh_mp.model_state_dict(fresh).items():
        assert torch.equal(value, model.state_dict()[name])
    for name, param in fresh.named_parameters():
        assert torch.equal(param, model.state_dict()[name].to(torch.bfloat16))
    save_checkpoint(tmp_path / "masters.st", fresh, fresh_opt, mp=fresh_mp)
    back, back_mp = _net(seed=2), MixedPrecision("bf16", "cpu")
    back_opt = torch.optim.AdamW(back.parameters(), lr=1e-2)
    load_checkpoint(tmp_path / "masters.st", back, back_opt, mp=back_mp)
    for name, value in back.state_dict().items():
        assert torch.equal(value, model.state_dict()[name])


def test_misuse_is_refused_with_the_fix() -> None:
    model = _net()
    optimizer = torch.optim.AdamW(model.parameters())
    mp = MixedPrecision("bf16", "cpu")
    with pytest.raises(TypeError, match="needs the optimizers"):
        mp.use_master_weights(model)
    with pytest.raises(TrainingStateError, match="none of the model's parameters"):
        mp.use_master_weights(model, torch.optim.AdamW(_net().parameters()))
    mp.backward(_loss(mp, model, 0))
    mp.step(optimizer)
    with pytest.raises(TrainingStateError, match="after training began"):
        mp.use_master_weights(model, optimizer)
    fresh = MixedPrecision("bf16", "cpu")
    with pytest.raises(TrainingStateError, match="already stepped"):
        fresh.use_master_weights(model, optimizer)
    half = _net().to(torch.bfloat16)
    with pytest.raises(TrainingStateError, match="needs fp32 parameters"):
        fresh.use_master_weights(half, torch.optim.AdamW(half.parameters()))
    assert not fresh.master_weights


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_batch_norm_keeps_fp32_parameters_and_trains(dtype: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    norm = model[1]
    mp = MixedPrecision(dtype, "cpu")
    mp.use_master_weights(model, optimizer)
    assert model[0].weight.dtype == mp.dtype
    assert norm.weight.dtype == torch.float32 and norm.running_mean.dtype == torch.float32
    assert any(p is norm.weight for p in optimizer.param_groups[0]["params"])  # no master
    x = torch.randn(4, 3, 8, 8)
    before = norm.weight.detach().clone()
    for _ in range(2):
        with mp.autocast():
            loss = model(x).float().square().mean()
        mp.backward(loss)
        assert mp.step(optimizer).applied
    assert not torch.equal(norm.weight, before) and torch.isfinite(norm.weight).all()
