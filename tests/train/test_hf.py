"""MixedPrecisionCallback inside a real transformers.Trainer (bf16 on CPU, tiny GPT-2)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from halfprec.train import TrainConfig, TrainingDivergedError
from halfprec.train.hf import MixedPrecisionCallback
from support.hf_models import build

STEPS = 6


def _data(rows: int = 4 * STEPS, length: int = 16) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 128, (rows, length), generator=gen)
    return [{"input_ids": row, "labels": row} for row in ids]


def _train(
    tmp_path: Path,
    callbacks: list[Any],
    poison_at: set[int] = frozenset(),
    model: nn.Module | None = None,
) -> tuple[nn.Module, list[dict[str, Any]]]:
    """Train a fresh tiny GPT-2 for STEPS steps with Trainer bf16; the training forwards
    numbered in ``poison_at`` (from 1) get inf out of block 0's MLP, as an overflow would."""
    from transformers import Trainer, TrainingArguments

    model = model if model is not None else build("gpt2").train()
    calls = [0]

    def overflow(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor | None:
        if not module.training:
            return None
        calls[0] += 1
        return output * math.inf if calls[0] in poison_at else None

    model.transformer.h[0].mlp.register_forward_hook(overflow)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        bf16=True,
        use_cpu=True,
        max_steps=STEPS,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        lr_scheduler_type="linear",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_data(), callbacks=callbacks)
    trainer.train()
    return model, [log for log in trainer.state.log_history if "loss" in log]


def _finite(model: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_loss_curve_is_plain_trainer_bf16_s_when_nothing_overflows(tmp_path: Path) -> None:
    _, plain = _train(tmp_path / "plain", [])
    callback = MixedPrecisionCallback()
    _, watched = _train(tmp_path / "watched", [callback])
    assert [log["loss"] for log in watched] == [log["loss"] for log in plain]
    assert len(plain) == STEPS and callback.steps_applied == STEPS and not callback.skipped


def test_a_nan_step_is_skipped_and_reported_not_left_in_the_parameters(tmp_path: Path) -> None:
    poisoned, _ = _train(tmp_path / "plain", [], poison_at={3})
    assert not _finite(poisoned)  # what plain Trainer bf16 does: NaN for good
    callback = MixedPrecisionCallback()
    model, logs = _train(tmp_path / "watched", [callback], poison_at={3})
    assert _finite(model)
    assert callback.steps_applied == STEPS - 1 and len(callback.skipped) == 1
    skipped = callback.skipped[0]
    assert skipped.step == 2  # the third optimizer step, after 2 applied ones
    assert skipped.activation == "transformer.h.0.mlp (GPT2MLP)"
    assert skipped.gradients.total > 0 and "(in " in skipped.gradients.names[0]
    assert logs[2]["loss"] == 0.0  # Trainer's logging_nan_inf_filter logs a skipped step so
    assert all(math.isfinite(log["loss"]) for log in logs[3:])
    # the caller's model keeps no hook of ours after train(): only the test's own is left
    assert len(model.transformer.h[0].mlp._forward_hooks) == 1
    assert not any(p._post_accumulate_grad_hooks for p in model.parameters())
    # the schedule holds on the skipped step 3: step 4 runs at step 3's learning rate
    rates = [log["learning_rate"] for log in logs]
    assert rates[1] > rates[2] == rates[3] > rates[4]


def test_the_watchdog_stops_a_run_that_keeps_skipping(tmp_path: Path) -> None:
    callback = MixedPrecisionCallback(TrainConfig(max_consecutive_skips=2))
    model = build("gpt2").train()
    with pytest.raises(TrainingDivergedError, match="2 optimizer steps in a row") as info:
        _train(tmp_path, [callback], poison_at={2, 3}, model=model)
    message = str(info.value)
    assert "in this bf16 run" in message and "train in bf16" not in message
    assert "first inf/NaN activation: transformer.h.0.mlp (GPT2MLP)" in message
    assert not any(p._post_accumulate_grad_hooks for p in model.parameters())


@pytest.mark.parametrize("activations", [True, False])
def test_activation_watch_is_an_option_of_the_callback(activations: bool) -> None:
    from types import SimpleNamespace

    from torch.utils._python_dispatch import TorchDispatchMode

    class Reductions(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            Reductions.count += func is torch.ops.aten.aminmax.default
            return func(*args, **(kwargs or {}))

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).train()
    callback = MixedPrecisionCallback(activations=activations)
    callback.on_train_begin(SimpleNamespace(bf16=True, fp16=False), None, None, model=model)
    with Reductions():
        model(torch.randn(2, 4))
    callback.on_train_end(None, None, None)
    assert Reductions.count == (3 if activations else 0)  # the Sequential and its 2 layers


def _hooks_of_one_step(callback: MixedPrecisionCallback, optimizer: Any) -> None:
    """The callback's hooks in the order Trainer calls them around one optimizer step."""
    from types import SimpleNamespace

    state = SimpleNamespace(global_step=1)
    callback.on_pre_optimizer_step(None, state, None, optimizer=optimizer)
    callback.on_optimizer_step(None, state, None, optimizer=optimizer)
    callback.on_step_end(None, state, None, optimizer=optimizer)


@pytest.mark.parametrize(("dtype", "reads"), [("fp16", 0), ("bf16", 1)])
def test_one_trainer_step_reads_the_device_at_most_once(dtype: str, reads: int) -> None:
    """The callback's sync budget per optimizer step: fp16 none (the GradScaler decides the
    skip; the scale is clamped where it lies), bf16 one (whether to drop the gradients).
    Was two with fp16: the norm's ``.item()`` and ``get_scale()``."""
    from types import SimpleNamespace

    from support.tuned import HostSyncs

    model = nn.Linear(4, 4)
    model(torch.randn(2, 4)).sum().backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20) if dtype == "fp16" else None
    if scaler is not None:
        scaler.scale(torch.ones(()))  # makes the scale tensor, as the first step does
    optimizer = SimpleNamespace(param_groups=opt.param_groups, scaler=scaler)
    callback = MixedPrecisionCallback(TrainConfig(max_scale=2.0**16))
    callback.on_train_begin(SimpleNamespace(bf16=dtype == "bf16", fp16=dtype == "fp16"), None, None)
    with HostSyncs() as syncs:
        _hooks_of_one_step(callback, optimizer)
    assert syncs.count == reads
    assert callback.steps_applied == 1 and not callback.skipped
    if scaler is not None:
        assert scaler.get_scale() == 2.0**16  # clamped to max_scale on its device
