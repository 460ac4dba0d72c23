"""The diagnose, preflight and tune commands: exit codes, JSON, files written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import testbed.hazards as hazards
from halfprec import Recipe

HAZARDS_FILE = str(Path(hazards.__file__).resolve())
FILL = f"{HAZARDS_FILE}:fill_model"
RMS = f"{HAZARDS_FILE}:rmsnorm_model"


def test_diagnose_json_names_the_culprit_and_writes_a_plot(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    png = tmp_path / "diag.png"
    proc = cli("diagnose", FILL, "--dtype", "fp16", "--json", "--plot", str(png))
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["divergence"]["culprit"] == "layers.0.attn.core"
    assert data["half_model"] == "naive"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_tune_writes_a_policy_that_convert_and_diagnose_reuse(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    policy = tmp_path / "policy.json"
    tuned = cli("tune", RMS, "--dtype", "fp16", "--no-op-policy", "-o", str(policy))
    assert tuned.returncode == 0, tuned.stderr
    assert "PASS: fp16 with 0 extra fp32 islands and 1 op islands" in tuned.stdout
    assert "op island: norm: pow at hazards.py:" in tuned.stdout
    assert "forward passes" in tuned.stdout and f"wrote {policy}" in tuned.stdout
    # the hint is a command that runs: convert's required -o included
    assert f"halfprec convert {RMS} --recipe {policy} -o OUT.safetensors" in tuned.stdout
    saved = json.loads(policy.read_text())
    assert saved["keep_fp32"] == [] and [o["module"] for o in saved["op_islands"]] == ["norm"]
    diag = cli("diagnose", RMS, "--recipe", str(policy), "--json")
    assert diag.returncode == 0, diag.stdout[-2000:]
    assert json.loads(diag.stdout)["divergence"] is None
    out = tmp_path / "model.safetensors"
    conv = cli("convert", RMS, "--recipe", str(policy), "-o", str(out), "--json")
    assert conv.returncode == 0, conv.stderr
    assert [o["module"] for o in json.loads(conv.stdout)["op_islands"]] == ["norm"]


def test_preflight_exit_code_and_json(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # convert saturates the -1e9 fills by default: found, handled, exit 0 (issue 34)
    proc = cli("preflight", FILL, "--dtype", "fp16", "--json")
    assert proc.returncode == 0, proc.stdout
    data = json.loads(proc.stdout)
    assert data["problems"] == 0 and data["forward_checked"]
    assert {f["recipe_field"] for f in data["findings"]} == {"saturate_fills"}
    recipe = Recipe(dtype="fp16", saturate_fills=False).save(tmp_path / "recipe.json")
    off = cli("preflight", FILL, "--recipe", str(recipe), "--json")
    assert off.returncode == 1, off.stderr
    assert json.loads(off.stdout)["problems"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("diagnose", FILL, "--plot", "out.txt"), "must end in .png"),
        (("tune", FILL, "-o", "policy.txt"), "must end in .json"),
        (("diagnose", FILL, "--dtype", "fp8"), "unknown dtype"),
    ],
)
def test_bad_input_exits_2_without_files(cli, tmp_path, args, message) -> None:  # type: ignore[no-untyped-def]
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_diagnose_real_minilm_fp16(cli) -> None:  # type: ignore[no-untyped-def]
    proc = cli("diagnose", "builtin:minilm", "--dtype", "fp16", "--batches", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["divergence"] is None and data["passed"]
    names = [m["name"] for m in data["modules"]]
    assert "encoder.encoder.layer.5.output.dense" in names
    assert all(m["local_error"] < 0.01 for m in data["modules"])


def test_diagnose_command_takes_the_recipes_islands(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from halfprec import Recipe
    from support import SUPPORT

    model = f"{SUPPORT / 'export_models.py'}:tiny"
    path = Recipe(dtype="fp16", keep_fp32=("l1",)).save(tmp_path / "r.json")
    out = cli("diagnose", model, "--recipe", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["half_model"] == "converted"
    naive = cli("diagnose", model, "--dtype", "fp16", "--json")
    assert json.loads(naive.stdout)["half_model"] == "naive"
