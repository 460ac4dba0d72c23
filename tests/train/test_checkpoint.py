"""Training checkpoints: bit-exact resume in a fresh process, safe loading, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from halfprec.errors import CheckpointError
from halfprec.train import MixedPrecision, load_checkpoint, save_checkpoint
from support import SRC, SUPPORT, TESTS
from support.train_job import build, train


def _contents(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), framework="pt") as handle:
        return {k: handle.get_tensor(k) for k in handle.keys()}, handle.metadata()  # noqa: SIM118


@pytest.mark.slow
@pytest.mark.parametrize("masters", [False, True], ids=["amp", "master-weights"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_resume_in_fresh_process_is_bit_exact(dtype: str, masters: bool, tmp_path: Path) -> None:
    straight, half, resumed = tmp_path / "ten.st", tmp_path / "five.st", tmp_path / "resumed.st"
    train(dtype, 10, straight, masters=masters)
    train(dtype, 5, half, masters=masters)
    env = dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{TESTS}", OMP_NUM_THREADS="1")
    script = SUPPORT / "train_job.py"
    cmd = [sys.executable, str(script), "--dtype", dtype, "--steps", "5"]
    cmd += ["--masters"] if masters else []
    subprocess.run(
        [*cmd, "--resume", str(half), "--out", str(resumed)], env=env, check=True, timeout=120
    )
    want, want_meta = _contents(straight)
    got, got_meta = _contents(resumed)
    assert sorted(want) == sorted(got)
    assert any(k.startswith("optimizer.state.") for k in want)
    assert any(k.startswith("rng.") for k in want)
    unequal = [k for k in want if not torch.equal(want[k], got[k])]
    assert unequal == []  # every parameter, optimizer moment, step count and RNG state
    # Scaler (scale, growth tracker), counters, scheduler and optimizer hyperparameters too.
    assert json.loads(want_meta["halfprec.train"]) == json.loads(got_meta["halfprec.train"])
    counters = json.loads(got_meta["halfprec.train"])["counters"]
    assert counters == {"step": 10}
    # master-weight mode saves the fp32 masters as the model's weights, as AMP does
    assert {want[k].dtype for k in want if k.startswith("model.")} == {torch.float32}


def test_resume_continues_skip_counters_and_scale(tmp_path: Path) -> None:
    train("fp16", 5, tmp_path / "five.st")
    model, optimizer, scheduler, mp = build("fp16")
    resumed = load_checkpoint(tmp_path / "five.st", model, optimizer, mp=mp, scheduler=scheduler)
    assert resumed.counters == {"step": 5}
    assert (mp.steps_applied, mp.steps_skipped) == (4, 1)
    assert mp.scale == mp.state_dict()["scaler"]["scale"] != 2.0**10
    assert scheduler.last_epoch == 4  # advanced on applied steps only


def _small() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_wrappers_are_unwrapped_so_keys_match_plain_model(tmp_path: Path) -> None:
    model, optimizer = _small()
    save_checkpoint(tmp_path / "c.st", nn.DataParallel(model), optimizer)
    fresh, fresh_opt = _small()
    load_checkpoint(tmp_path / "c.st", fresh, fresh_opt)
    assert torch.equal(fresh.weight, model.weight)


def test_failed_save_keeps_previous_file(tmp_path: Path) -> None:
    model, optimizer = _small()
    path = save_checkpoint(tmp_path / "c.st", model, optimizer)
    before = path.read_bytes()

    class Odd:
        def state_dict(self) -> dict[str, object]:
            return {"fn": print}

        def load_state_dict(self, state: dict[str, object]) -> None: ...

    with pytest.raises(CheckpointError, match=r"cannot store builtin_function_or_method"):
        save_checkpoint(path, model, optimizer, scheduler=Odd())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.st"]


def test_load_errors_name_the_problem(tmp_path: Path) -> None:
    model, optimizer = _small()
    with pytest.raises(CheckpointError, match=r"no such checkpoint file"):
        load_checkpoint(tmp_path / "missing.st", model, optimizer)
    (tmp_path / "junk.st").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(CheckpointError, match=r"not a readable safetensors file"):
        load_checkpoint(tmp_path / "junk.st", model, optimizer)
    save_file({"w": torch.zeros(2)}, str(tmp_path / "plain.st"))
    with pytest.raises(CheckpointError, match=r"not a halfprec training checkpoint"):
        load_checkpoint(tmp_path / "plain.st", model, optimizer)
    save_checkpoint(tmp_path / "c.st", model, optimizer)
    wider = nn.Linear(5, 2)
    with pytest.raises(CheckpointError, match=r"do not fit this model.*same architecture"):
        load_checkpoint(tmp_path / "c.st", wider, torch.optim.SGD(wider.parameters(), lr=0.1))
    two_groups = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias]}], lr=0.1)
    with pytest.raises(CheckpointError, match=r"optimizer state does not fit this optimizer"):
        load_checkpoint(tmp_path / "c.st", model, two_groups)
    with pytest.raises(CheckpointError, match=r"has no mixed_precision state, but mp= was passed"):
        load_checkpoint(tmp_path / "c.st", model, optimizer, mp=MixedPrecision("bf16"))
    save_checkpoint(tmp_path / "mp.st", model, optimizer, mp=MixedPrecision("fp16"))
    with pytest.raises(CheckpointError, match=r"holds mixed_precision state, but no mp="):
        load_checkpoint(tmp_path / "mp.st", model, optimizer)
    with pytest.raises(CheckpointError, match=r"from a fp16 run"):  # the docs' error
        load_checkpoint(tmp_path / "mp.st", model, optimizer, mp=MixedPrecision("bf16"))


def test_a_bf16_run_saves_an_empty_scaler_and_resumes_in_process(tmp_path: Path) -> None:
    # bf16 scales no loss: its scaler state is empty, as GradScaler's own, and the checks on
    # load accept that (a scale without growth_factor and backoff_factor was refused)
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("bf16", device="cpu")
    with mp.autocast():
        loss = model(torch.randn(3, 4)).float().square().mean()
    mp.backward(loss)
    mp.step(optimizer)
    assert mp.state_dict()["scaler"] == {}
    save_checkpoint(tmp_path / "c.st", model, optimizer, mp=mp)
    fresh_mp = MixedPrecision("bf16", device="cpu")
    load_checkpoint(tmp_path / "c.st", model, optimizer, mp=fresh_mp)
    assert fresh_mp.steps_applied == 1
