"""Every bad input and environment failure: one stderr line, exit 2, nothing written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from safetensors.torch import save_file

import halfprec
from support import FIXTURES, SUPPORT
from support.cli import run_cli
from support.export_models import example_inputs, tiny

USER = f"{FIXTURES / 'user_model.py'}:build"
TINY = f"{SUPPORT / 'export_models.py'}:tiny"


def _one_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("halfprec: error: ")
    for needle in needles:
        assert needle in proc.stderr


@pytest.mark.parametrize("command", ["check", "tune"])
def test_out_of_range_min_cosine_is_exit_2(command: str) -> None:
    extra = ["--runs", "0"] if command == "check" else []
    _one_error(run_cli(command, USER, "--min-cosine", "2", *extra), "--min-cosine")


def test_meta_device_is_exit_2() -> None:
    _one_error(run_cli("check", USER, "--device", "meta", "--runs", "0"), "'meta'", "use cpu")


def test_missing_output_folder_is_not_created(tmp_path: Path) -> None:
    out = tmp_path / "nonexistent_dir" / "x.safetensors"
    _one_error(run_cli("convert", USER, "-o", str(out)), "does not exist", "--mkdirs")
    assert not out.parent.exists()
    _one_error(run_cli("convert", USER, "-o", "/nonexistent_dir/x.safetensors"))
    assert not Path("/nonexistent_dir").exists()
    assert run_cli("convert", USER, "-o", str(out), "--mkdirs").returncode == 0
    assert out.is_file()


def test_output_under_a_regular_file_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    out = tmp_path / "plain" / "x.safetensors"
    _one_error(run_cli("convert", USER, "-o", str(out)), "is not a folder")
    _one_error(run_cli("export", TINY, "-o", str(tmp_path / "plain" / "x.pt2")), "not a folder")


def test_disk_full_is_exit_2_and_leaves_nothing(tiny_fs: Path) -> None:
    out = tiny_fs / "big.safetensors"
    proc = run_cli("convert", "builtin:cnn", "-o", str(out), "--dtype", "fp16")
    _one_error(proc, f"cannot use {out}: the disk is full")
    assert list(tiny_fs.iterdir()) == []


def test_read_only_file_system_is_exit_2(tiny_fs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    _one_error(run_cli("convert", USER, "-o", str(tiny_fs / "x.safetensors")), "read-only")


def test_bad_json_in_checkpoint_metadata_is_exit_2(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    assert run_cli("convert", USER, "-o", str(good), "--dtype", "fp16").returncode == 0
    from safetensors import safe_open

    with safe_open(str(good), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        meta = dict(f.metadata())
    for bad in ("{not json", '{"a": 1}'):
        forged = tmp_path / "forged.safetensors"
        save_file(tensors, str(forged), metadata={**meta, "keep_fp32": bad})
        _one_error(run_cli("check", USER, "--weights", str(forged), "--runs", "0"), "keep_fp32")


@pytest.mark.parametrize("arch", [["os"], [42], ["pipeline"], "BertModel; rm"])
def test_odd_architectures_entry_is_exit_2(tmp_path: Path, arch: object) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": arch}))
    _one_error(run_cli("check", str(tmp_path), "--runs", "0"), "architectures")


def test_bad_config_json_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{")
    _one_error(run_cli("check", str(tmp_path), "--runs", "0"), "not valid JSON")


def test_artifact_of_another_model_is_exit_2(tmp_path: Path) -> None:
    artifact = tmp_path / "tiny.pt2"
    halfprec.export(tiny(), example_inputs(), artifact, "fp16", runs=0)
    _one_error(
        run_cli("check", USER, "--artifact", str(artifact), "--runs", "0"),
        "does not fit",
        "exported from",
    )


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    proc = run_cli("--debug", "convert", USER, "-o", str(tmp_path / "no" / "x.safetensors"))
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "halfprec: error:" in proc.stderr
