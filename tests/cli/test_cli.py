"""The command line, run as a user would: a subprocess, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from support import FIXTURES
from support.cli import run_cli, run_cli_subprocess

FIXTURE = FIXTURES / "user_model.py"
SPEC = f"{FIXTURE}:build"


def one_line_error(proc, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("halfprec: error: "), proc.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def test_check_passes_with_json() -> None:
    proc = run_cli("check", SPEC, "--dtype", "fp16", "--json", "--runs", "2")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] is True and data["conversion"]["dtype"] == "fp16"
    assert data["comparison"]["outputs"][0]["cosine"] > 0.999
    assert data["bytes_half"] < data["bytes_fp32"]
    assert data["latency_fp32_s"] > 0 and data["latency_half_s"] > 0


def test_check_exits_1_when_out_of_tolerance() -> None:
    proc = run_cli("check", SPEC, "--dtype", "bf16", "--min-sqnr", "200", "--runs", "0")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert "FAIL" in proc.stdout and "SQNR" in proc.stdout


def test_convert_writes_half_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "net.safetensors"
    proc = run_cli("convert", SPEC, "--dtype", "fp16", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "fp32 islands: 1 modules" in proc.stdout
    from halfprec.io.checkpoint import read_metadata

    assert read_metadata(out)["dtype"] == "fp16"
    assert [p.name for p in tmp_path.iterdir()] == ["net.safetensors"]


def test_unknown_model_spec(tmp_path: Path) -> None:
    proc = run_cli("convert", "resnet-ish", "-o", str(tmp_path / "x.safetensors"))
    one_line_error(proc, "unknown MODEL 'resnet-ish'")
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_factory_that_raises_and_non_module() -> None:
    one_line_error(run_cli("check", f"{FIXTURE}:broken"), "the factory raised RuntimeError")
    one_line_error(run_cli("check", f"{FIXTURE}:not_a_module"), "returned int, not an nn.Module")


def test_missing_files() -> None:
    one_line_error(run_cli("check", "missing/model.py:build"), "not found; check the path")
    one_line_error(run_cli("check", SPEC, "--inputs", "nope.safetensors"), "not found")


def test_corrupt_safetensors_inputs_and_weights(tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    one_line_error(run_cli("check", SPEC, "--inputs", str(bad)), "not a valid safetensors file")
    one_line_error(run_cli("check", SPEC, "--weights", str(bad)), "truncated or corrupt")


class Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned",))


def test_pickled_checkpoint_carrying_code_is_refused(tmp_path: Path) -> None:
    evil = tmp_path / "weights.pt"
    evil.write_bytes(pickle.dumps({"lin.weight": Evil()}))
    proc = run_cli("check", SPEC, "--weights", str(evil), cwd=tmp_path)
    one_line_error(proc, "refusing to unpickle")
    assert not (tmp_path / "pwned").exists()


def test_inputs_of_the_wrong_shape(tmp_path: Path) -> None:
    path = tmp_path / "in.safetensors"
    save_file({"0": torch.randn(4, 7)}, str(path))
    one_line_error(
        run_cli("check", SPEC, "--inputs", str(path)),
        "failed on batch 0 (0: float32[4, 7]) with RuntimeError",
    )


def test_device_this_machine_cannot_run_and_unknown_dtype() -> None:
    if not torch.cuda.is_available():
        one_line_error(run_cli("check", SPEC, "--device", "cuda"), "not available here")
    one_line_error(run_cli("check", SPEC, "--dtype", "fp8"), "unknown dtype 'fp8'")


def test_debug_shows_the_traceback() -> None:
    proc = run_cli("--debug", "check", f"{FIXTURE}:broken")
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_output_must_be_safetensors(tmp_path: Path) -> None:
    proc = run_cli("convert", SPEC, "-o", str(tmp_path / "x.pt"))
    assert proc.returncode == 2 and "must end in .safetensors" in proc.stderr
    assert list(tmp_path.iterdir()) == []


# a fresh interpreter: the only test of `python -m halfprec` itself
@pytest.mark.slow
def test_subprocess_smoke_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """In a fresh interpreter, as a shell user runs it: one line on stderr, exit 2."""
    proc = run_cli_subprocess("convert", SPEC, "-o", str(tmp_path / "x.pt"))
    one_line_error(proc, "must end in .safetensors")
    assert list(tmp_path.iterdir()) == []


def test_python_m_halfprec_names_itself_halfprec() -> None:
    """README runs the tool as scripts/halfprec (``python -m halfprec``): its usage line and
    ``--version`` say ``halfprec``, the command a user types, not ``python -m halfprec``."""
    version = run_cli_subprocess("--version")
    assert version.returncode == 0 and version.stdout == "halfprec, version 0.1.0\n"
    usage = run_cli_subprocess("check", "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("Usage: halfprec check [OPTIONS]")


@pytest.mark.parametrize("name", ["notes.txt", "weights.pt", "model.bin", "batch.pth"])
def test_a_text_file_given_as_any_data_file_is_one_line_naming_it(
    tmp_path: Path, name: str
) -> None:
    text = tmp_path / name
    text.write_text("hello world\nthese are notes, not tensors\n", encoding="utf-8")
    for args in (
        ["check", SPEC, "--weights", str(text), "--runs", "0"],
        ["check", SPEC, "--inputs", str(text), "--runs", "0"],
        ["convert", SPEC, "--weights", str(text), "-o", str(tmp_path / "o.safetensors")],
        ["tune", SPEC, "--validate", str(text)],
    ):
        proc = run_cli(*args)
        one_line_error(proc, text.name)
