"""MixedPrecision: autocast, scaled backward, checked steps, accumulation, watchdog, state."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from halfprec.errors import DTypeError
from halfprec.train import (
    MixedPrecision,
    TrainConfig,
    TrainingDivergedError,
    TrainingStateError,
    needs_loss_scaling,
)
from halfprec.train.mixed import ensure_autocast_runs


def _model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def _batch(n: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=gen), torch.randint(0, 3, (n,), generator=gen)


def _loss(model: nn.Module, mp: MixedPrecision, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with mp.autocast():
        return nn.functional.cross_entropy(model(x), y)


def _poison(param: torch.Tensor) -> None:
    """Make this parameter's gradient inf from the next backward on."""
    param.register_hook(lambda g: g * math.inf)


def test_bf16_runs_without_scaler_and_fp16_with_cpu_scaler() -> None:
    bf16 = MixedPrecision("bf16", "cpu")
    fp16 = MixedPrecision("fp16", "cpu")
    assert not bf16.scaling and bf16.scale == 1.0
    assert fp16.scaling and fp16.scale == 2.0**16
    assert not needs_loss_scaling(torch.bfloat16) and needs_loss_scaling(torch.float16)
    model, (x, _) = _model(), _batch()
    for mp, dtype in ((bf16, torch.bfloat16), (fp16, torch.float16)):
        with mp.autocast():
            assert model(x).dtype == dtype  # fp16 on CPU really computes in fp16
        assert not torch.is_autocast_enabled("cpu")


def test_dtype_autocast_would_drop_is_refused_not_run_in_fp32() -> None:
    ensure_autocast_runs(torch.float16, torch.device("cpu"))  # supported: no error
    # CPU autocast disables itself (with a warning only) for a dtype it cannot run.
    with pytest.raises(DTypeError, match=r"does not compute in fp64.*ran in fp32.*silently"):
        ensure_autocast_runs(torch.float64, torch.device("cpu"))


def test_auto_resolves_through_device_table() -> None:
    mp = MixedPrecision("auto", "cpu")
    assert mp.dtype in (torch.float16, torch.bfloat16)
    assert mp.reason.startswith("auto:")


def test_grad_norm_is_unscaled_and_matches_plain_backward() -> None:
    model, (x, y) = _model(), _batch()
    reference = copy.deepcopy(model)
    mp = MixedPrecision("fp16", "cpu")
    mp.backward(_loss(model, mp, x, y))
    outcome = mp.step(torch.optim.SGD(model.parameters(), lr=0.0))
    _loss(reference, mp, x, y).backward()
    expected = torch.nn.utils.get_total_norm([p.grad for p in reference.parameters()])
    assert outcome.applied and not outcome.found_inf
    assert outcome.grad_norm == pytest.approx(float(expected), rel=1e-2)


def test_clipping_acts_on_unscaled_gradients() -> None:
    model, (x, y) = _model(), _batch()
    before = [p.detach().clone() for p in model.parameters()]
    mp = MixedPrecision("fp16", "cpu", TrainConfig(init_scale=1024.0))
    mp.backward(_loss(model, mp, x, y) * 10)
    outcome = mp.step(torch.optim.SGD(model.parameters(), lr=1.0), clip_grad_norm=0.5)
    assert outcome.grad_norm is not None and outcome.grad_norm > 0.5
    moved = torch.cat(
        [(p.detach() - b).flatten() for p, b in zip(model.parameters(), before, strict=True)]
    )
    # SGD with lr=1 moves by exactly the clipped gradient: its norm is the clip value,
    # not the clip value divided by the loss scale.
    assert float(moved.norm()) == pytest.approx(0.5, rel=1e-3)


def test_inf_skips_step_backs_off_scale_and_holds_scheduler() -> None:
    model, (x, y) = _model(), _batch()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    mp = MixedPrecision("fp16", "cpu")
    handle = model[0].weight.register_hook(lambda g: g * math.inf)
    before = copy.deepcopy(model.state_dict())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp.backward(_loss(model, mp, x, y))
        skipped = mp.step(optimizer, schedulers=[scheduler])
        handle.remove()
        mp.backward(_loss(model, mp, x, y))
        applied = mp.step(optimizer, schedulers=[scheduler])
    assert skipped.skipped and skipped.found_inf
    assert skipped.scale_before == 2.0**16 and skipped.scale_after == 2.0**15
    assert skipped.step == 0 and applied.step == 1
    assert applied.applied and applied.scale_before == 2.0**15
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]
    assert scheduler.get_last_lr() == [0.05]  # advanced once: on the applied step only
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert (mp.steps_applied, mp.steps_skipped) == (1, 1)


def test_skipped_step_leaves_parameters_and_optimizer_state_untouched() -> None:
    model, (x, y) = _model(), _batch()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu")
    mp.backward(_loss(model, mp, x, y))
    mp.step(optimizer)
    params = copy.deepcopy(model.state_dict())
    opt_state = copy.deepcopy(optimizer.state_dict())
    _poison(model[2].bias)
    mp.backward(_loss(model, mp, x, y))
    assert mp.step(optimizer).skipped
    assert all(torch.equal(params[k], v) for k, v in model.state_dict().items())
    after = optimizer.state_dict()["state"]
    for index, state in opt_state["state"].items():
        assert all(torch.equal(state[k], after[index][k]) for k in state)
    assert all(p.grad is None for p in model.parameters())  # consumed gradients are cleared


def test_several_models_and_optimizers_share_one_scaler_and_skip_together() -> None:
    a, b, (x, y) = _model(0), _model(1), _batch()
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu")
    with mp.autocast():
        loss = nn.functional.cross_entropy(a(x), y) + nn.functional.cross_entropy(b(x), y)
    mp.backward(loss)
    assert mp.step(opt_a, opt_b).applied
    a_before = copy.deepcopy(a.state_dict())
    _poison(b[0].weight)
    with mp.autocast():
        loss = nn.functional.cross_entropy(a(x), y) + nn.functional.cross_entropy(b(x), y)
    mp.backward(loss)
    assert mp.step(opt_a, opt_b).skipped
    # b's gradient overflowed; a's step is skipped too, as one step of one run.
    assert all(torch.equal(a_before[k], v) for k, v in a.state_dict().items())


def test_accumulation_matches_one_big_batch() -> None:
    x, y = _batch(8)
    big, small = _model(), _model()
    mp_big = MixedPrecision("bf16", "cpu")
    mp_big.backward(_loss(big, mp_big, x, y))
    mp_big.step(torch.optim.SGD(big.parameters(), lr=0.5))
    mp = MixedPrecision("bf16", "cpu", TrainConfig(accumulation_steps=4))
    optimizer = torch.optim.SGD(small.parameters(), lr=0.5)
    statuses = []
    for i in range(4):
        mp.backward(_loss(small, mp, x[2 * i : 2 * i + 2], y[2 * i : 2 * i + 2]))
        statuses.append(mp.step(optimizer).status)
    assert statuses == ["accumulating"] * 3 + ["applied"]
    for p, q in zip(big.parameters(), small.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=2e-3, rtol=1e-2)


def test_scale_stays_between_floor_and_ceiling() -> None:
    config = TrainConfig(init_scale=256.0, growth_interval=1, max_scale=1024.0, min_scale=64.0)
    model, (x, y) = _model(), _batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    mp = MixedPrecision("fp16", "cpu", config)
    scales = []
    for _ in range(4):
        mp.backward(_loss(model, mp, x, y))
        scales.append(mp.step(optimizer).scale_after)
    assert scales == [512.0, 1024.0, 1024.0, 1024.0]
    _poison(model[0].bias)
    for _ in range(6):
        mp.backward(_loss(model, mp, x, y))
        scales.append(mp.step(optimizer).scale_after)
    assert scales[4:] == [512.0, 256.0, 128.0, 64.0, 64.0, 64.0]


def test_watchdog_names_first_inf_gradient_in_backward_order() -> None:
    model, (x, y) = _model(), _batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu", TrainConfig(max_consecutive_skips=3))
    mp.watch(model)
    _poison(model[0].weight)
    _poison(model[2].weight)  # nearer the loss: its gradient goes inf first
    with pytest.raises(TrainingDivergedError, match=r"3 optimizer steps in a row") as info:
        for _ in range(3):
            mp.backward(_loss(model, mp, x, y))
            mp.step(optimizer)
    message = str(info.value)
    assert "2.weight (in 2: Linear) first" in message
    assert "0.weight" in message and "keep that module in fp32" in message


def test_watchdog_without_watch_points_at_optimizer_slot() -> None:
    model, (x, y) = _model(), _batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("bf16", "cpu", TrainConfig(max_consecutive_skips=1))
    _poison(model[2].bias)
    mp.backward(_loss(model, mp, x, y))
    with pytest.raises(TrainingDivergedError, match=r"params\[3\] \(shape \(3,\)\).*mp.watch"):
        mp.step(optimizer)


def _overflowing_model() -> nn.Sequential:
    """Block 0 overflows fp16 in its forward; the norm after it turns the inf into NaN, so
    the first bad gradient in backward order is the head's (2.weight), not block 0's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.Linear(16, 3))
    with torch.no_grad():
        model[0].weight.fill_(2e4)  # 6 inputs of ~1 each: outputs far above fp16's 65504
    return model


def test_watchdog_names_the_module_whose_forward_made_the_inf() -> None:
    model, (x, y) = _overflowing_model(), _batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu", TrainConfig(max_consecutive_skips=2))
    mp.watch(model)
    with pytest.raises(TrainingDivergedError) as info:
        for _ in range(2):
            mp.backward(_loss(model, mp, x.abs() + 1, y))
            mp.step(optimizer)
    message = str(info.value)
    assert "2.weight (in 2: Linear) first" in message  # the gradient view: next to the loss
    assert "first inf/NaN activation: 0 (Linear)" in message  # the forward view: the cause
    mp.unwatch()  # no hooks left: the next divergence has neither names nor activation
    with torch.no_grad():
        model[0].weight.fill_(0.1)
    mp.backward(_loss(model, mp, x, y))
    assert mp.step(optimizer).applied
    with torch.no_grad():
        model[0].weight.fill_(2e4)
    with pytest.raises(TrainingDivergedError, match=r"params\[2\].*mp.watch") as info:
        for _ in range(2):
            mp.backward(_loss(model, mp, x.abs() + 1, y))
            mp.step(optimizer)
    assert "activation" not in str(info.value)


@pytest.mark.parametrize(("dtype", "advised"), [("bf16", False), ("fp16", True)])
def test_watchdog_advises_bf16_only_to_a_run_that_is_not_bf16(dtype: str, advised: bool) -> None:
    model, (x, y) = _model(), _batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision(dtype, "cpu", TrainConfig(max_consecutive_skips=1))
    _poison(model[2].bias)
    mp.backward(_loss(model, mp, x, y))
    with pytest.raises(TrainingDivergedError, match=f"in this {dtype} run") as info:
        mp.step(optimizer)
    assert ("train in bf16" in str(info.value)) == advised
    assert ("loss scale now" in str(info.value)) == advised  # bf16 has no loss scale


def test_state_dict_round_trip_restores_scale_tracker_and_counters() -> None:
    config = TrainConfig(init_scale=1024.0, growth_interval=3)
    model, (x, y) = _model(), _batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    mp = MixedPrecision("fp16", "cpu", config)
    handle = model[0].bias.register_hook(lambda g: g * math.inf)
    mp.backward(_loss(model, mp, x, y))
    mp.step(optimizer)
    handle.remove()
    for _ in range(2):
        mp.backward(_loss(model, mp, x, y))
        mp.step(optimizer)
    state = mp.state_dict()
    fresh = MixedPrecision("fp16", "cpu", config)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    assert state["scaler"]["_growth_tracker"] == 2 and fresh.scale == 512.0
    # One more applied step completes the growth interval in both: same scale after.
    scales = []
    for mp_ in (mp, fresh):
        mp_.backward(_loss(model, mp_, x, y))
        scales.append(mp_.step(optimizer).scale_after)
    assert scales == [1024.0, 1024.0]


def test_load_state_dict_refuses_other_dtype_and_config() -> None:
    state = MixedPrecision("fp16", "cpu").state_dict()
    with pytest.raises(
        TrainingStateError, match=r"from a fp16 run.*is bf16.*MixedPrecision\('fp16'"
    ):
        MixedPrecision("bf16", "cpu").load_state_dict(state)
    other = MixedPrecision("fp16", "cpu", TrainConfig(growth_interval=10))
    with pytest.raises(TrainingStateError, match=r"growth_interval: saved 2000, now 10"):
        other.load_state_dict(state)
    with pytest.raises(TrainingStateError, match=r"not a MixedPrecision state"):
        other.load_state_dict({"scale": 1.0})


def test_misuse_errors_name_the_fix() -> None:
    model, (x, y) = _model(), _batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("bf16", "cpu", TrainConfig(accumulation_steps=2))
    with mp.autocast():
        loss = nn.functional.cross_entropy(model(x), y)
        with pytest.raises(TrainingStateError, match=r"inside autocast\(\).*then call mp.backward"):
            mp.backward(loss)
    with pytest.raises(
        TrainingStateError, match=r"no backward\(\).*call mp.backward\(loss\) first"
    ):
        mp.step(optimizer)
    mp.backward(loss)
    with pytest.raises(TrainingStateError, match=r"after 1 of 2 accumulated micro-batches"):
        mp.state_dict()
    mp.backward(_loss(model, mp, x, y))
    with pytest.raises(
        TrainingStateError, match=r"3 times since the last step.*accumulation_steps=2"
    ):
        mp.backward(_loss(model, mp, x, y))
    with pytest.raises(ValueError, match=r"clip_grad_norm=0"):
        mp.step(optimizer, clip_grad_norm=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"growth_factor": 1.0}, r"growth_factor=1.0\): must be > 1"),
        ({"backoff_factor": 1.5}, r"backoff_factor=1.5\): must be in \(0, 1\)"),
        ({"min_scale": 10.0, "init_scale": 1.0}, r"need min_scale <= init_scale <= max_scale"),
        ({"max_scale": math.inf}, r"max_scale=inf\): must be a finite number > 0"),
        ({"max_consecutive_skips": 0}, r"or None to turn the watchdog off"),
        ({"accumulation_steps": 0}, r"accumulation_steps=0\): must be >= 1"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)  # type: ignore[arg-type]


def test_unknown_dtype_is_rejected() -> None:
    with pytest.raises(DTypeError, match=r"unknown dtype 'fp8'"):
        MixedPrecision("fp8", "cpu")


class _HostReads(TorchDispatchMode):
    """Counts reads of a tensor's value into Python (``.item()``, ``float(t)``,
    ``bool(t)``): each is a host-device sync when the tensor is on an accelerator."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("clip", [None, 1.0])
def test_an_applied_step_reads_the_device_once(dtype: str, clip: float | None) -> None:
    """One host sync per step (the norm that decides apply/skip and the next loss scale),
    not one for the scale before, one for found-inf and one for the scale after."""
    model, (x, y) = _model(), _batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # SGD itself reads nothing
    mp = MixedPrecision(dtype, "cpu", TrainConfig(init_scale=1024.0, growth_interval=2))
    scales = []
    for _ in range(3):
        mp.backward(_loss(model, mp, x, y))
        with _HostReads() as reads:
            outcome = mp.step(optimizer, clip_grad_norm=clip)
            scales.append((outcome.scale_before, outcome.scale_after, mp.scale))
        assert outcome.applied and reads.count == 1
        assert outcome.grad_norm is not None and math.isfinite(outcome.grad_norm)
    if dtype == "fp16":  # the host's scale follows GradScaler's rule: growth every 2 steps
        assert scales == [(1024.0, 1024.0, 1024.0), (1024.0, 2048.0, 2048.0), (2048.0,) * 3]
    else:
        assert scales == [(1.0, 1.0, 1.0)] * 3
