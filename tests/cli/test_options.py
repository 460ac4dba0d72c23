"""Flags shared by several commands mean one thing everywhere (docs/cli.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
import torch

from halfprec import Recipe
from support import FIXTURES
from support.cli import run_cli

FIXTURE = FIXTURES / "user_model.py"
SPEC = f"{FIXTURE}:build"
MISSING = "no_such_dir/model.py:build"

# every command that converts a model, with the arguments it needs besides MODEL
CONVERTING = {
    "check": [],
    "convert": ["-o", "x.safetensors"],
    "tune": [],
    "diagnose": [],
    "audit": [],
    "bench": [],
    "export": ["-o", "x.pt2"],
    "deploy": ["-o", "x.safetensors"],
}


def _one_line(proc, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("halfprec: error: "), proc.stderr
    assert needle in lines[0], lines[0]


@pytest.mark.parametrize("command", [*CONVERTING, "preflight"])
def test_dtype_is_a_choice_checked_before_the_model_loads(command: str) -> None:
    extra = CONVERTING.get(command, [])
    proc = run_cli(command, MISSING, *extra, "--dtype", "fp32")
    _one_line(proc, "unknown dtype 'fp32'; use one of: auto, fp16, bf16")


@pytest.mark.parametrize("command", CONVERTING)
def test_conversion_flags_exist_in_every_converting_command(command: str) -> None:
    out = run_cli(command, "--help").stdout
    for flag in ("--dtype", "--recipe", "--keep-fp32", "--no-norm-islands", "--device"):
        assert flag in out, f"{command} lacks {flag}"
    assert "--no-default-islands" not in out


@pytest.mark.parametrize("command", [*CONVERTING, "preflight"])
def test_device_has_one_default_everywhere(command: str) -> None:
    out = " ".join(run_cli(command, "--help").stdout.split())
    assert "cpu, cuda or cuda:N. [default: (cuda if present, else cpu)]" in out


def test_no_norm_islands_in_check() -> None:
    base = ["check", SPEC, "--dtype", "fp16", "--runs", "0", "--json"]
    kept = json.loads(run_cli(*base).stdout)
    dropped = json.loads(run_cli(*base, "--no-norm-islands").stdout)
    assert kept["conversion"]["islands"] == {"norm": "norm island (LayerNorm)"}
    assert dropped["conversion"]["islands"] == {}


def test_no_norm_islands_in_tune_and_the_old_spelling_is_gone(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    proc = run_cli("tune", SPEC, "--dtype", "fp16", "--no-norm-islands", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert Recipe.load(out).norm_islands is False  # every island is named in the recipe
    _one_line(run_cli("tune", SPEC, "--no-default-islands"), "No such option")


def _tolerances(data: dict) -> list[dict]:  # type: ignore[type-arg]
    found = []
    if isinstance(data, dict):
        if "tolerance" in data and isinstance(data["tolerance"], dict):
            found.append(data["tolerance"])
        for k, v in data.items():
            if k == "recipe":  # the conversion's recipe: its tolerance is the recipe default
                continue
            found += _tolerances(v) if isinstance(v, (dict, list)) else []
    elif isinstance(data, list):
        for v in data:
            found += _tolerances(v)
    return found


@pytest.mark.parametrize(
    "command, extra",
    [
        ("check", ["--runs", "0"]),
        ("tune", ["--max-evaluations", "2"]),
        (
            "bench",
            ["--variants", "halfprec-fp16", "--runs", "1", "--warmup", "1", "--no-memory"]
            + ["--no-skip", "--no-limit"],  # fp16 is timed even where this CPU emulates it
        ),
    ],
)
def test_min_cosine_keeps_the_sqnr_check_and_min_sqnr_keeps_cosine(
    command: str, extra: list[str]
) -> None:
    cos = run_cli(command, SPEC, "--dtype", "fp16", "--min-cosine", "0.5", "--json", *extra)
    tols = _tolerances(json.loads(cos.stdout))
    assert tols and all(t["min_cosine"] == 0.5 and t["min_sqnr_db"] == 25.0 for t in tols)
    sqnr = run_cli(command, SPEC, "--dtype", "fp16", "--min-sqnr", "10", "--json", *extra)
    tols = _tolerances(json.loads(sqnr.stdout))
    assert tols and all(t["min_cosine"] == 0.999 and t["min_sqnr_db"] == 10.0 for t in tols)


def test_min_cosine_is_range_checked_before_loading() -> None:
    proc = run_cli("check", MISSING, "--min-cosine", "2")
    _one_line(proc, "--min-cosine")


def test_explicit_dtype_wins_over_the_policy_on_the_command_line(tmp_path: Path) -> None:
    policy = tmp_path / "p.json"
    Recipe(dtype=torch.float16, keep_fp32=("head",)).save(policy)
    out = tmp_path / "m.safetensors"
    base = ["convert", SPEC, "-o", str(out), "--recipe", str(policy), "--json"]
    from_policy = json.loads(run_cli(*base).stdout)
    assert from_policy["dtype"] == "fp16" and "head" in from_policy["islands"]
    explicit = json.loads(run_cli(*base, "--dtype", "bf16").stdout)
    assert explicit["dtype"] == "bf16" and "head" in explicit["islands"]


def test_keep_fp32_means_the_same_in_check_and_diagnose() -> None:
    args = ["--dtype", "fp16", "--keep-fp32", "head", "--json"]
    check = run_cli("check", SPEC, *args, "--runs", "0")
    assert "head" in json.loads(check.stdout)["conversion"]["islands"]
    # diagnose examines convert()'s output once any island flag is given
    diag = run_cli("diagnose", SPEC, *args)
    naive = run_cli("diagnose", SPEC, "--dtype", "fp16", "--json")
    assert json.loads(diag.stdout)["half_model"] == "converted"
    assert json.loads(naive.stdout)["half_model"] == "naive"


@pytest.mark.parametrize("command", [*CONVERTING, "preflight"])
def test_dtype_default_names_the_recipe_only_where_there_is_one(command: str) -> None:
    out = " ".join(run_cli(command, "--help").stdout.split())
    if "--recipe PATH" in out:
        assert "[default: (the --recipe's dtype, else auto)]" in out
    else:
        assert "--recipe" not in out and "--dtype [auto|fp16|bf16]" in out
        assert "[default: (auto)]" in out


def test_tolerance_flags_replace_their_threshold_and_leave_the_rest_to_the_dtype() -> None:
    """--min-cosine replaces the recipe's cosine only: the SQNR left to the default follows
    each dtype it is judged in (fp16 25 dB, bf16 20 dB), as without the flag."""
    from halfprec import Tolerance
    from halfprec.cli.options import with_tolerance_flags

    recipe = Recipe(tolerance=Tolerance(max_rel_error=0.5))
    assert with_tolerance_flags(recipe, None, None) is recipe
    flagged = with_tolerance_flags(recipe, 0.9, None).settle("cpu")
    assert flagged.judge(torch.float16) == Tolerance(0.9, 25.0, 0.5, None)
    assert flagged.judge(torch.bfloat16) == Tolerance(0.9, 20.0, 0.5, None)
    assert with_tolerance_flags(recipe, None, 30.0).settle().judge(torch.bfloat16).min_sqnr_db == 30


@pytest.mark.parametrize(
    "name, stored",
    [("float16", "fp16"), ("half", "fp16"), ("bfloat16", "bf16"), ("torch.bfloat16", "bf16")],
)
def test_torchs_dtype_names_are_accepted(tmp_path: Path, name: str, stored: str) -> None:
    out = tmp_path / "m.safetensors"
    proc = run_cli("convert", SPEC, "--dtype", name, "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dtype"] == stored


def test_no_pre_release_aliases() -> None:
    assert "--policy" not in run_cli("check", "--help").stdout
    proc = run_cli("check", SPEC, "--policy", "p.json")
    _one_line(proc, "No such option '--policy'")


def _options(name: str) -> dict[str, click.Option]:
    from halfprec.cli import main

    command = main.get_command(click.Context(main), name)
    assert command is not None
    return {p.opts[-1]: p for p in command.params if isinstance(p, click.Option)}


def test_budget_is_one_option_in_bench_and_deploy() -> None:
    """One factory: the same help and checks; the default differs, each shown, and
    deploy's help says its seconds are the whole process's."""
    from halfprec.bench.budget import BENCH_BUDGET_S, PROCESS_BUDGET_S

    bench, deploy = _options("bench")["--budget"], _options("deploy")["--budget"]
    assert bench.help is not None and deploy.help is not None
    assert deploy.help.startswith(bench.help) and type(bench.type) is type(deploy.type)
    assert "count from this process's start" in deploy.help
    assert (bench.default, deploy.default) == (BENCH_BUDGET_S, PROCESS_BUDGET_S)
    for command, args in (("bench", []), ("deploy", ["-o", "x.safetensors"])):
        _one_line(run_cli(command, MISSING, *args, "--budget", "-1"), "--budget")


@pytest.mark.parametrize("command", [*CONVERTING, "preflight", "lint"])
def test_every_float_range_refuses_nan_before_the_model_loads(command: str) -> None:
    """``nan < 0`` is False, so click's own FloatRange lets NaN through every bound."""
    from halfprec.cli import main

    root = click.Context(main, **main.context_settings)
    for option in _options(command).values():
        if not isinstance(option.type, click.FloatRange):
            continue
        with pytest.raises(click.BadParameter, match="'nan' is not a number"):
            option.type.convert("nan", option, click.Context(main, parent=root))


def test_docs_cli_writes_each_default_as_help_shows_it() -> None:
    """docs/cli.md spells a default as ``--help`` does, ``[default: X]``, and each one it
    states is one that some command's ``--help`` shows."""
    from support import ROOT

    page = (ROOT / "docs" / "cli.md").read_text()
    assert "Default:" not in page, "write a default as --help does: [default: X]"
    helps = " ".join(
        " ".join(run_cli(command, "--help").stdout.split())
        for command in [*CONVERTING, "preflight", "lint"]
    )
    stated = re.findall(r"\[default: [^\]]*\]", page)
    assert stated, "docs/cli.md states no default"
    # click adds an IntRange's bounds after a semicolon: "[default: 10; x>=0]"
    assert [d for d in stated if d not in helps and f"{d[:-1]};" not in helps] == []


def test_an_option_left_out_says_what_it_means() -> None:
    from halfprec.export.config import DEFAULT_OPSET

    export = " ".join(run_cli("export", "--help").stdout.split())
    assert f"ONNX opset (>= 17). [default: {DEFAULT_OPSET}; x>=17]" in export
    assert _options("export")["--opset"].default == DEFAULT_OPSET
    diagnose = " ".join(run_cli("diagnose", "--help").stdout.split())
    assert "Use only the first N batches. [default: (every batch); x>=1]" in diagnose
