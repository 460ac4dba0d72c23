"""`halfprec check` never PASSes without a finite reference and values actually compared."""

from __future__ import annotations

import json
import math
import re
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
    one_line_error(proc, "is stored as bf16 but the recipe in its metadata makes it fp16")
    from halfprec.io.checkpoint import load
    from halfprec.io.specs import load_model

    fresh = load_model(USER).model
    assert load(good, into=fresh).lin.weight.dtype == torch.float16  # the original loads


def _strict_json(text: str) -> dict:  # type: ignore[type-arg]
    def refuse(name: str) -> None:
        raise AssertionError(f"not strict JSON: {name}")

    data: dict = json.loads(text, parse_constant=refuse)  # type: ignore[type-arg]
    return data


def test_json_is_strict_and_writes_non_finite_numbers_as_strings() -> None:
    proc = run_cli("check", f"{ODD}:ones", "--dtype", "fp16", "--runs", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    out = _strict_json(proc.stdout)["comparison"]["outputs"][0]
    assert out["sqnr_db"] == "inf" and out["max_abs"] == 0


def test_fp32_output_that_underflows_in_fp16_fails() -> None:
    proc = run_cli("check", f"{ODD}:tiny", "--dtype", "fp16", "--runs", "0", "--json")
    assert proc.returncode == 1, proc.stderr
    data = _strict_json(proc.stdout)
    assert data["passed"] is False and "cosine 0.000000 < 0.999" in data["comparison"]["reason"]


def test_half_model_crashing_on_batch_1_is_a_fail_naming_it() -> None:
    proc = run_cli("check", f"{ODD}:crash", "--dtype", "fp16", "--runs", "0")
    assert proc.returncode == 1, proc.stderr
    assert "batch 1: the half model raised KeyError: 'cache_position'" in proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout


def test_fp32_model_asserting_on_the_inputs_is_exit_2_naming_them(tmp_path: Path) -> None:
    x = inputs_file(tmp_path, torch.randn(2, 5))
    proc = run_cli("check", f"{ODD}:asserts", "--inputs", x, "--runs", "0")
    one_line_error(proc, "the fp32 model failed on batch 0 (0: float32[2, 5]) with AssertionError")
    assert "forward wants 4 features, got 5" in proc.stderr


@pytest.mark.parametrize("flag", ["--min-sqnr", "--min-cosine"])
def test_nan_threshold_is_exit_2(flag: str) -> None:
    proc = run_cli("check", USER, flag, "nan", "--runs", "0")
    one_line_error(proc, "nan")


def _doc_keys(label: str) -> list[str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = text.split("## JSON output", 1)[1].split("\n## ", 1)[0]
    item = section.split(f"- {label}: ", 1)[1].split("\n\n", 1)[0].split(";", 1)[0]
    return re.findall(r"`([a-z_0-9]+)`", item)


def test_check_json_keys_are_the_documented_schema() -> None:
    proc = run_cli("check", f"{ODD}:ones", "--dtype", "fp16", "--runs", "0", "--json")
    data = _strict_json(proc.stdout)
    assert list(data) == _doc_keys("top level")
    assert list(data["comparison"]) == _doc_keys("`comparison`")
    assert list(data["comparison"]["outputs"][0]) == _doc_keys("each of `comparison.outputs`")
    assert data["latency_fp32_s"] is None and data["generation"] is None


def test_export_of_a_half_model_raising_key_error_is_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "crash.pt2"
    proc = run_cli("export", f"{ODD}:crash", "-o", str(out), "--dtype", "fp16")
    one_line_error(proc, "fails in PyTorch before export (KeyError: 'cache_position')")
    assert not out.exists()


@pytest.mark.parametrize("command", ["audit", "preflight", "diagnose", "tune", "check", "bench"])
def test_every_command_reports_inputs_the_fp32_model_refuses_as_exit_2(
    tmp_path: Path, command: str
) -> None:
    x = inputs_file(tmp_path, torch.randn(2, 5))
    proc = run_cli(command, f"{ODD}:asserts", "--inputs", x, "--dtype", "fp16")
    one_line_error(proc, "the fp32 model failed on batch 0 (0: float32[2, 5]) with AssertionError")


def test_json_writes_inf_minus_inf_and_nan_as_strings() -> None:
    from halfprec.report.json_text import to_json_text

    text = to_json_text({"a": math.inf, "b": [-math.inf, {"c": math.nan}], "d": (1.5, 2)})
    assert _strict_json(text) == {"a": "inf", "b": ["-inf", {"c": "nan"}], "d": [1.5, 2]}


def _strict_recipe(tmp_path: Path) -> str:
    """A recipe whose tolerance no half run of USER meets (SQNR >= 200 dB: fp16 gives ~65)."""
    path = tmp_path / "strict.json"
    strict = {"format": "halfprec-recipe/1", "dtype": "fp16", "tolerance": {"min_sqnr_db": 200}}
    path.write_text(json.dumps(strict))
    return str(path)


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("check", ["--runs", "0"]),
        ("check", ["--runs", "0", "--min-cosine", "0.5"]),  # a flag leaves the SQNR standing
        ("diagnose", []),
        ("export", ["-o", "OUT"]),
    ],
)
def test_the_recipes_tolerance_is_what_the_verdict_demands(
    tmp_path: Path, command: str, extra: list[str]
) -> None:
    """--recipe's tolerance (docs/conversion.md: "what a check demands") used to be ignored:
    the check ran at the dtype's default 25 dB and PASSed a recipe asking for 200 dB."""
    extra = [str(tmp_path / "m.pt2") if a == "OUT" else a for a in extra]
    proc = run_cli(command, USER, "--recipe", _strict_recipe(tmp_path), "--json", *extra)
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert '"min_sqnr_db": 200' in proc.stdout


def test_the_python_verbs_judge_by_the_recipes_tolerance() -> None:
    import halfprec
    from fixtures.user_model import build, example_inputs

    strict = halfprec.Recipe(dtype="fp16", tolerance=halfprec.Tolerance(min_sqnr_db=200))
    result = halfprec.check(build(), example_inputs(), strict, runs=0)
    assert not result.passed and result.comparison.tolerance.min_sqnr_db == 200
    diagnosis = halfprec.diagnose(build(), example_inputs(), strict)
    assert diagnosis.output.tolerance.min_sqnr_db == 200


def test_bench_counts_a_variant_accurate_by_the_recipes_tolerance(tmp_path: Path) -> None:
    flags = ["--runs", "1", "--warmup", "1", "--no-memory", "--no-skip", "--no-limit"]
    proc = run_cli(
        "bench", USER, "--recipe", _strict_recipe(tmp_path), "--variants", "fp32,halfprec-fp16",
        "--json", *flags,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    half = next(r for r in json.loads(proc.stdout)["results"] if r["variant"] == "halfprec-fp16")
    assert half["accurate"] is False and half["comparison"]["tolerance"]["min_sqnr_db"] == 200
