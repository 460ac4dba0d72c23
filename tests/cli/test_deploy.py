"""``halfprec deploy``: the choice written to -o in its own form, the report, and -o forms
that cannot hold a choice refused in one line (exit 2) before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

TINY = """
import torch
from torch import nn


def tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8))


def example_inputs():
    return torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
"""


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("models") / "tiny.py"
    path.write_text(TINY)
    return f"{path}:tiny"


FAST = ("--no-compile", "--runtimes", "none", "--runs", "2", "--dtype", "bf16")


def test_deploy_writes_the_choice_and_reports_it(cli, tiny_spec: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from safetensors.torch import load_file

    out = tmp_path / "tiny.safetensors"
    proc = cli("deploy", tiny_spec, "-o", str(out), *FAST, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["output"] == str(out)
    assert data["variant"] in ("fp32", "halfprec-bf16")  # whichever was faster here
    assert data["runtime"] == "torch" and data["accurate"] is True
    tensors = load_file(str(out))
    want = torch.bfloat16 if data["variant"] == "halfprec-bf16" else torch.float32
    assert {t.dtype for t in tensors.values()} == {want}
    assert set(tensors) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_deploy_table_names_choice_speed_and_accuracy(cli, tiny_spec: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "tiny.safetensors"
    proc = cli("deploy", tiny_spec, "-o", str(out), *FAST)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"wrote {out}: ") and "(run by torch)" in first
    assert "than fp32" in proc.stdout or "1.00x fp32" in proc.stdout
    assert "accuracy" in proc.stdout


@pytest.mark.parametrize(
    ("name", "extra", "says"),
    [
        ("out.bin", (), "deploy writes .safetensors"),
        ("out.pt2", (), "deploy writes .safetensors"),
        ("out.xml", ("--runtimes", "none"), "add --runtimes openvino"),
        ("out.onnx", ("--runtimes", "openvino"), "add --runtimes onnxruntime"),
    ],
)
def test_deploy_refuses_an_output_that_cannot_hold_a_choice(  # type: ignore[no-untyped-def]
    cli, tiny_spec: str, tmp_path: Path, name: str, extra: tuple[str, ...], says: str
) -> None:
    out = tmp_path / name
    proc = cli("deploy", tiny_spec, "-o", str(out), "--no-compile", *extra)
    assert proc.returncode == 2
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_deploy_refuses_a_bad_runtimes_list(cli, tiny_spec: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = cli("deploy", tiny_spec, "-o", str(tmp_path / "x.safetensors"), "--runtimes", ",")
    assert proc.returncode == 2 and "--runtimes" in proc.stderr


def test_deploy_output_is_no_input(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = tmp_path / "m.py"
    model.write_text(TINY)
    proc = cli("deploy", f"{model}:tiny", "-o", str(tmp_path), "--no-compile")
    assert proc.returncode == 2 and "would replace" in proc.stderr


def test_cli_deploy_plans_the_library_s_rounds_per_candidate() -> None:
    """``halfprec deploy`` plans the rounds ``halfprec.deploy`` does: the race's min_rounds
    (3); past them a close rival is never settled (tests/bench/test_claim.py)."""
    from halfprec.bench.deploy import _quick
    from halfprec.cli.deploy import command

    runs = next(p for p in command.params if p.name == "runs")
    assert runs.default == _quick().runs == 3


def test_deploy_s_budget_counts_from_the_process_start_and_keeps_the_end(  # type: ignore[no-untyped-def]
    cli, tiny_spec: str, tmp_path: Path
) -> None:
    """``halfprec deploy --budget S`` is for the whole process: the interpreter's start, the
    imports and the model's load are charged before deploy runs (``budget_spent_s`` > 0:
    they always take some time), and the last seconds are kept for writing the choice and
    exiting; ``--budget 0`` lifts the bound and keeps nothing."""
    from halfprec.bench.budget import PROCESS_BUDGET_S, PROCESS_END_S

    out = tmp_path / "tiny.safetensors"
    data = json.loads(cli("deploy", tiny_spec, "-o", str(out), *FAST, "--json").stdout)
    report = data["report"]
    assert report["budget_s"] == PROCESS_BUDGET_S
    assert report["budget_reserve_s"] == PROCESS_END_S and report["budget_spent_s"] > 0
    data = json.loads(
        cli("deploy", tiny_spec, "-o", str(out), *FAST, "--budget", "0", "--json").stdout
    )
    assert data["report"]["budget_s"] is None and data["report"]["budget_reserve_s"] == 0.0


LOGGED = """
import torch
from pathlib import Path
from torch import nn


def tiny():
    Path(__file__).with_suffix(".loaded").write_text("loaded")
    return nn.Sequential(nn.Linear(8, 8))


def example_inputs():
    return torch.randn(2, 8)
"""


@pytest.mark.parametrize(
    ("flags", "dtype"), [(frozenset(), "auto"), (frozenset({"avx512f"}), "fp16")]
)
def test_a_folder_on_a_cpu_without_fast_half_is_refused_before_the_model_loads(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: frozenset[str], dtype: str
) -> None:
    """The device table says, before the model loads, that no half dtype is fast on this
    CPU (injected: a Zen 3, an AVX512 CPU without BF16), so a folder could hold nothing
    deploy would choose: the refusal comes before the model's factory is called."""
    from halfprec import dtypes

    monkeypatch.setattr(dtypes, "_cpu_flags", lambda: flags)
    model = tmp_path / "m.py"
    model.write_text(LOGGED)
    folder = tmp_path / "out"
    args = ("deploy", f"{model}:tiny", "-o", str(folder), "--device", "cpu", "--dtype", dtype)
    proc = cli(*args, "--no-compile", "--runtimes", "none")
    assert proc.returncode == 2, proc.stderr
    assert "no fast" in proc.stderr and "give -o NAME.safetensors" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not model.with_suffix(".loaded").exists() and not folder.exists()
