"""`halfprec check` never PASSes without a finite reference and values actually compared."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from support import FIXTURES
from support.cli import run_cli

USER = f"{FIXTURES / 'user_model.py'}:build"
ODD = FIXTURES / "verdict_models.py"


def one_line_error(proc, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("halfprec: error: "), proc.stderr
    assert needle in lines[0], lines[0]


def inputs_file(tmp_path: Path, x: torch.Tensor) -> str:
    path = tmp_path / "in.safetensors"
    save_file({"0": x}, str(path))
    return str(path)


@pytest.mark.parametrize("factory", ["nan_output", "nan_weights"])
def test_broken_fp32_model_is_exit_2(factory: str) -> None:
    proc = run_cli("check", f"{ODD}:{factory}", "--dtype", "fp16", "--runs", "0")
    one_line_error(proc, "the fp32 reference itself is broken: output 'output' of batch 0")


def test_inputs_that_overflow_fp32_are_exit_2(tmp_path: Path) -> None:
    x = inputs_file(tmp_path, torch.full((2, 16), 1e30))
    proc = run_cli("check", USER, "--inputs", x, "--dtype", "fp16", "--runs", "0")
    one_line_error(proc, "holds 8 NaN in 8 values")


def test_empty_batch_fails_with_a_reason(tmp_path: Path) -> None:
    x = inputs_file(tmp_path, torch.zeros(0, 16))
    proc = run_cli("check", USER, "--inputs", x, "--dtype", "fp16", "--runs", "0")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert "FAIL: output: 0 values compared: the output is empty" in proc.stdout


@pytest.mark.parametrize(
    ("factory", "kind"), [("returns_none", "NoneType"), ("returns_string", "str")]
)
def test_no_tensor_outputs_fail_with_a_reason(factory: str, kind: str) -> None:
    proc = run_cli("check", f"{ODD}:{factory}", "--dtype", "fp16", "--runs", "0")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert f"FAIL: batch 0: the model returned no tensors ({kind})" in proc.stdout


def test_pass_prints_what_was_compared() -> None:
    proc = run_cli("check", USER, "--dtype", "fp16", "--runs", "0")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "PASS: 1 output(s), 64 values compared over 2 batch(es)" in proc.stdout


def test_weights_of_another_kind_are_refused(tmp_path: Path) -> None:
    state = {
        "lin.weight": torch.zeros(32, 16, dtype=torch.int32),
        "lin.bias": torch.zeros(32),
        "norm.weight": torch.ones(32),
        "norm.bias": torch.zeros(32),
        "head.weight": torch.zeros(4, 32),
        "head.bias": torch.zeros(4),
    }
    path = tmp_path / "w.safetensors"
    save_file(state, str(path))
    proc = run_cli("check", USER, "--weights", str(path), "--runs", "0")
    one_line_error(proc, "lin.weight is int32 but the model's is fp32")


def test_weights_whose_metadata_contradicts_their_tensors_are_refused(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    assert run_cli("convert", USER, "--dtype", "fp16", "-o", str(good)).returncode == 0
    with safe_open(str(good), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    assert meta["dtype"] == "fp16"
    relabelled = {
        k: v.to(torch.bfloat16) if v.dtype == torch.float16 else v for k, v in tensors.items()
    }
    bad = tmp_path / "bad.safetensors"
    save_file(relabelled, str(bad), metadata=meta)
    proc = run_cli("check", USER, "--weights", str(bad), "--runs", "0")
    one_line_error(proc, "metadata says fp16 but")
    from halfprec.io.checkpoint import load
    from halfprec.io.specs import load_model

    fresh = load_model(USER).model
    assert load(good, into=fresh).lin.weight.dtype == torch.float16  # the original loads
