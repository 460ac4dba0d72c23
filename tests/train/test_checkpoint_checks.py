"""Forged training checkpoints are refused before any model, optimizer or mp state changes."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from halfprec.errors import CheckpointError
from halfprec.train import MixedPrecision, load_checkpoint, save_checkpoint
from support.special_files import fifo, within

META = "halfprec.train"


def _trained(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()  # Adam now holds exp_avg / exp_avg_sq / step
    return model, optimizer


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    model, optimizer = _trained(0)
    mp = MixedPrecision("fp16", device="cpu")
    return save_checkpoint(tmp_path / "c.st", model, optimizer, mp=mp, counters={"step": 1})


def _forge(path: Path, change: Callable[[dict[str, Any], dict[str, torch.Tensor]], None]) -> Path:
    with safe_open(str(path), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        meta = json.loads(f.metadata()[META])
    change(meta, tensors)
    forged = path.with_name("forged.st")
    save_file(tensors, str(forged), metadata={META: json.dumps(meta)})
    return forged


def _part(meta: dict[str, Any], name: str) -> Any:
    return next(v for k, v in meta["tree"]["__dict__"] if k == name)


def _entry(tree: Any, name: str) -> Any:
    return next(v for k, v in tree["__dict__"] if k == name)


def _set(tree: Any, name: str, value: Any) -> None:
    for pair in tree["__dict__"]:
        if pair[0] == name:
            pair[1] = value


def _drop(tree: Any, name: str) -> None:
    tree["__dict__"] = [pair for pair in tree["__dict__"] if pair[0] != name]


def _python_rng(meta: dict[str, Any]) -> list[int]:
    """The 625 words of the saved Python RNG state, as stored (a list to edit in place)."""
    python = _entry(_part(meta, "rng"), "python")
    words: list[int] = python["__tuple__"][1]["__tuple__"]
    return words


FORGERIES: dict[str, tuple[Callable[[dict[str, Any], dict[str, torch.Tensor]], None], str]] = {
    "negative loss scale": (
        lambda m, t: _set(_entry(_part(m, "mixed_precision"), "scaler"), "scale", -1e30),
        r"scale is -1e\+30",
    ),
    "nan growth factor": (
        lambda m, t: _set(_entry(_part(m, "mixed_precision"), "scaler"), "growth_factor", None),
        "growth_factor",
    ),
    "negative step counter": (
        lambda m, t: _set(_entry(_part(m, "mixed_precision"), "counters"), "steps_applied", -5),
        "step counters",
    ),
    "rng not a state": (lambda m, t: _set(m["tree"], "rng", {"__dict__": []}), "RNG state"),
    "groups not a list": (
        lambda m, t: _set(_part(m, "optimizer"), "param_groups", "all"),
        "parameter groups",
    ),
    "moment of the wrong shape": (
        lambda m, t: t.update({k: torch.zeros(7) for k in t if k.endswith("exp_avg")}),
        r"optimizer state 'exp_avg' of parameter \d has shape \[7\], not the parameter's",
    ),
    # a 0-dim moment used to load, overwrite the model, and crash the next step
    "0-dim Adam moment": (
        lambda m, t: t.update({k: torch.zeros(()) for k in t if k.endswith("exp_avg")}),
        r"optimizer state 'exp_avg' of parameter \d has shape \[\], not the parameter's",
    ),
    # these used to be KeyError, AttributeError and torch's RuntimeError
    "mixed precision without dtype": (
        lambda m, t: _drop(_part(m, "mixed_precision"), "dtype"),
        "the mixed precision state has no dtype",
    ),
    "mixed precision without config": (
        lambda m, t: _drop(_part(m, "mixed_precision"), "config"),
        "the mixed precision state has no config",
    ),
    "mixed precision config as a list": (
        lambda m, t: _set(_part(m, "mixed_precision"), "config", [1, 2]),
        "the mixed precision state has no config",
    ),
    "scaler emptied in an fp16 run": (
        lambda m, t: _set(_part(m, "mixed_precision"), "scaler", {"__dict__": []}),
        r"the loss scaler state is empty, but this run scales its loss \(fp16\)",
    ),
    "missing tensor": (lambda m, t: t.pop("model.weight"), "state tree is malformed"),
    "tree not a dict": (lambda m, t: m.update(tree=[1, 2]), "state tree is malformed"),
    "counters not numbers": (lambda m, t: m.update(counters={"step": [1]}), "counters"),
    "zeroed mt19937 torch RNG state": (
        lambda m, t: t.update({"rng.torch": torch.zeros_like(t["rng.torch"])}),
        r"the torch RNG state is refused by torch \(Invalid mt19937 state\)",
    ),
    "python RNG index out of range": (
        lambda m, t: _python_rng(m).__setitem__(624, 700),
        r"the Python RNG state is refused by random \(invalid state\)",
    ),
    "model weight of another dtype kind": (
        lambda m, t: t.update({"model.weight": torch.zeros(3, 4, dtype=torch.int32)}),
        "do not fit this model",
    ),
}


@pytest.mark.parametrize("name", list(FORGERIES))
def test_forged_checkpoint_is_refused_and_nothing_changes(saved: Path, name: str) -> None:
    change, message = FORGERIES[name]
    forged = _forge(saved, change)
    model, optimizer = _trained(1)
    mp = MixedPrecision("fp16", device="cpu")
    before = (copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()))
    mp_before = mp.state_dict()
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(forged, model, optimizer, mp=mp)
    after = (model.state_dict(), optimizer.state_dict())
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])
    assert repr(before[1]) == repr(after[1])
    assert mp.state_dict() == mp_before


def test_the_unforged_file_loads(saved: Path) -> None:
    model, optimizer = _trained(1)
    resumed = load_checkpoint(saved, model, optimizer, mp=MixedPrecision("fp16", device="cpu"))
    want, _ = _trained(0)
    assert torch.equal(model.weight, want.weight) and resumed.counters == {"step": 1}


def test_a_fifo_checkpoint_is_refused_at_once(tmp_path: Path) -> None:
    pipe = fifo(tmp_path / "c.st")
    model, optimizer = _trained(1)
    with pytest.raises(CheckpointError, match=r"it is a FIFO \(named pipe\), not a checkpoint"):
        within(5, lambda: load_checkpoint(pipe, model, optimizer), pipe)


def test_an_fp16_run_resumed_as_bf16_is_a_checkpoint_error(saved: Path) -> None:
    model, optimizer = _trained(1)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(CheckpointError, match="from a fp16 run, but this MixedPrecision is bf16"):
        load_checkpoint(saved, model, optimizer, mp=MixedPrecision("bf16", device="cpu"))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_bf16_weights_past_fp16_s_range_are_refused_not_loaded_as_inf(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source = nn.Linear(4, 3).to(torch.bfloat16)
    with torch.no_grad():
        source.weight[0, 0] = 1e5  # fits bf16, past fp16's 65504
    path = save_checkpoint(tmp_path / "bf16.st", source, torch.optim.SGD(source.parameters()))
    target = nn.Linear(4, 3).to(torch.float16)
    before = copy.deepcopy(target.state_dict())
    with pytest.raises(CheckpointError, match=r"out of range weight \(bf16 values past fp16"):
        load_checkpoint(path, target, torch.optim.SGD(target.parameters()))
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
    with torch.no_grad():
        source.weight[0, 0] = 4096.0  # in range: loads
    fits = save_checkpoint(tmp_path / "ok.st", source, torch.optim.SGD(source.parameters()))
    load_checkpoint(fits, target, torch.optim.SGD(target.parameters()))
    assert target.weight[0, 0].item() == 4096.0
