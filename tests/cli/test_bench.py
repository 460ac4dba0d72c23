"""``halfprec bench``: JSON, plot, the machine line, and bad arguments (exit 2, no output)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from halfprec.bench.budget import PROCESS_BUDGET_S
from halfprec.errors import HalfprecError
from support.cli import run_cli

TINY = """
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.fc2 = nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def tiny():
    torch.manual_seed(0)
    return Tiny()


def example_inputs():
    return torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
"""


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny.py"
    path.write_text(TINY)
    return path


# -- CLI ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_bench_json_and_plot(cli, tiny_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    chart = tmp_path / "out" / "chart.png"
    chart.parent.mkdir()  # a missing --plot folder is an error (tests/cli/test_errors.py)
    proc = cli(
        "bench",
        f"{tiny_file}:tiny",
        "--variants",
        "fp32,halfprec-bf16",
        "--batch-sizes",
        "256",
        "--runs",
        "3",
        "--no-skip",  # time bf16 even on a CPU that only emulates it
        "--json",
        "--plot",
        str(chart),
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [(r["variant"], r["batch_size"]) for r in data["results"]] == [
        ("fp32", 256),
        ("halfprec-bf16", 256),
    ]
    memory = data["results"][1]["memory"]
    assert memory["method"] == "rss subprocess"
    assert memory["peak_bytes"] > 50 * 2**20  # python and torch are resident
    assert 0 <= memory["delta_bytes"] < memory["peak_bytes"]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_cli_bench_table_names_the_machine(cli, tiny_file: Path) -> None:  # type: ignore[no-untyped-def]
    proc = cli(
        "bench", f"{tiny_file}:tiny", "--variants", "naive-bf16", "--runs", "3", "--no-memory"
    )
    assert proc.returncode == 0, proc.stderr
    assert "AVX512-BF16" in proc.stdout and "torch " in proc.stdout
    assert "naive-bf16" in proc.stdout and "auto would choose" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variants", "fp32,turbo"], "unknown variant 'turbo'"),
        (["--batch-sizes", "1,x"], "--batch-sizes '1,x' is not a list of positive integers"),
        (["--plot", "chart.svg"], "the chart is a PNG"),
    ],
)
def test_cli_bench_bad_arguments_exit_2_without_output(
    cli,
    tiny_file: Path,
    tmp_path: Path,
    args: list[str],
    message: str,  # type: ignore[no-untyped-def]
) -> None:
    proc = cli("bench", f"{tiny_file}:tiny", *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ["0", "1,x", "-3", ","])
def test_cli_batch_sizes_parse_errors(text: str) -> None:
    from halfprec.cli.bench import _batch_sizes

    with pytest.raises(HalfprecError, match="not a list of positive integers; write e.g. 1,8"):
        _batch_sizes(text)
    assert _batch_sizes("1, 8,32") == (1, 8, 32)


def test_cli_bench_no_race_times_every_variant_and_says_where_time_went(  # type: ignore[no-untyped-def]
    cli, tiny_file: Path
) -> None:
    args = ["bench", f"{tiny_file}:tiny", "--variants", "fp32,naive-bf16", "--runs", "4"]
    proc = cli(*args, "--no-skip", "--no-memory", "--no-limit", "--no-race", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [r["runs"] for r in data["results"]] == [4, 4]
    assert {"build", "warm-up", "timing", "total"} <= set(data["seconds"])
    table = cli(*args, "--no-skip", "--no-memory", "--no-limit")
    assert table.returncode == 0, table.stderr
    assert "bench took " in table.stdout and " s: " in table.stdout
    assert "; time budget 120 s" in table.stdout  # bench's default, like deploy's 50 s


def test_cli_bench_probe_cache_and_its_switch(  # type: ignore[no-untyped-def]
    cli, tiny_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from halfprec.bench.limit import clear_probe_cache

    monkeypatch.setenv("HALFPREC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HALFPREC_PROBE_CACHE", "1")
    args = ["bench", f"{tiny_file}:tiny", "--variants", "naive-bf16", "--runs", "3"]
    args += ["--no-memory", "--no-limit", "--skip-slower-than", "1e-9", "--json"]
    clear_probe_cache()
    assert cli(*args, "--no-probe-cache").returncode == 0
    assert not (tmp_path / "cache").exists()
    clear_probe_cache()
    first = json.loads(cli(*args).stdout)["results"][1]["note"]
    assert first.startswith("bf16 matmuls run") and "cached" not in first
    assert len(list((tmp_path / "cache").glob("probe-*.json"))) == 1
    clear_probe_cache()
    assert ", cached " in json.loads(cli(*args).stdout)["results"][1]["note"]


@pytest.mark.slow
@pytest.mark.parametrize("flag", [False, True])
def test_compiled_variants_cpu_memory_only_when_asked(cli, tiny_file: Path, flag: bool) -> None:  # type: ignore[no-untyped-def]
    # ~10-25 s: the compiled variant's subprocess compiles again, which is why it is opt-in
    args = ["bench", f"{tiny_file}:tiny", "--variants", "fp32", "--compile", "--runs", "3"]
    args += ["--no-limit", "--no-race", "--json"] + (["--compiled-memory"] if flag else [])
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    by_name = {r["variant"]: r for r in data["results"]}
    assert by_name["fp32"]["memory"]["method"] == "rss subprocess"
    compiled = by_name["fp32+compile"]
    noted = any("compiled variants' memory is not measured" in w for w in data["warnings"])
    if flag:
        assert compiled["memory"]["method"] == "rss subprocess" and not noted
    else:
        assert compiled["memory"] is None and noted


def test_cli_bench_quick_times_fewer_rounds_measures_no_memory_and_says_so(  # type: ignore[no-untyped-def]
    cli, tiny_file: Path
) -> None:
    args = ["bench", f"{tiny_file}:tiny", "--variants", "fp32,naive-bf16", "--no-skip"]
    given = json.loads(  # first: its imports are charged to no budget (a minute at load 16)
        cli(*args, "--quick", "--runs", "5", "--budget", "0", "--no-race", "--json").stdout
    )
    assert [r["runs"] for r in given["results"]] == [5, 5] and "5 timed runs" in given["quick"]
    assert given["budget_s"] is None and "no time budget" in given["quick"]
    data = json.loads(cli(*args, "--quick", "--no-race", "--json").stdout)
    assert [r["runs"] for r in data["results"]] == [3, 3]
    assert not any(data["limits"].values())
    assert all(r["memory"] is None for r in data["results"])
    assert data["quick"].startswith("quick run (--quick): 3 timed runs, 1 warm-up")
    budget = PROCESS_BUDGET_S  # halfprec deploy's
    assert data["budget_s"] == budget and f"a {budget:g} s time budget" in data["quick"]
    table = cli(*args, "--quick")
    assert table.returncode == 0, table.stderr
    assert "quick run (--quick)" in table.stdout and "leave out --quick" in table.stdout
    assert "quick" not in json.loads(cli(*args, "--runs", "3", "--no-memory", "--json").stdout)


def test_cli_bench_prints_a_progress_line_per_variant_then_one_table(  # type: ignore[no-untyped-def]
    cli, tiny_file: Path
) -> None:
    args = ["--variants", "naive-bf16", "--quick", "--runs", "2", "--no-skip", "--no-probe-cache"]
    proc = cli("bench", f"{tiny_file}:tiny", *args)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("bench [1/2] fp32, batch 4: ok ("), proc.stderr
    assert lines[1].startswith("bench [2/2] naive-bf16, batch 4: ok, cosine 0.99"), proc.stderr
    assert len(lines) == 2, proc.stderr  # no warnings: the progress lines are all of stderr
    assert sum(line.startswith("┃ variant") for line in proc.stdout.splitlines()) == 1


def test_cli_bench_names_what_its_time_budget_left_out(  # type: ignore[no-untyped-def]
    cli, tiny_file: Path
) -> None:
    """A budget spent before the first candidate (any run spends 1 ns): naive-bf16 is not
    built, fp32 is not timed alone, no memory subprocess starts, and the line under the
    table says so with the way to lift it, as deploy's summary does."""
    args = ["bench", f"{tiny_file}:tiny", "--variants", "fp32,naive-bf16", "--no-skip"]
    proc = cli(*args, "--budget", "1e-9", "--no-limit", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["budget_s"] == 1e-9
    assert data["budget"].startswith("not run within the time budget: naive-bf16 (not run: ")
    assert data["budget"].endswith("budget_s=None (--budget 0) lifts it)")
    assert [r["status"] for r in data["results"]] == ["ok", "skipped"]
    assert all(r["memory"] is None for r in data["results"])
    assert any(w.startswith("memory not measured: ") for w in data["warnings"])


def test_cli_bench_s_budget_counts_from_the_process_start_as_deploy_s(
    tiny_file: Path,
) -> None:
    """``halfprec bench --budget S`` counts from its process's start, as ``halfprec deploy``'s:
    run as a process 30 s old (imports and a model's load can take that under load), 30 s
    of a 20 s budget are spent before the run, so naive-bf16 is not run and the line
    under the table says what was spent; counted from the run's start, it would run."""
    args = ["bench", f"{tiny_file}:tiny", "--variants", "fp32,naive-bf16", "--no-skip"]
    proc = run_cli(
        *args, "--budget", "20", "--no-limit", "--no-memory", "--json", started_at=time.time() - 30
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["budget_spent_s"] >= 30
    assert [r["status"] for r in data["results"]] == ["ok", "skipped"]
    assert data["budget"].startswith("not run within the time budget: naive-bf16 (not run: 3")
    assert "s of the 20 s budget were spent" in data["budget"]


def test_cli_bench_takes_no_compile_as_deploy_does(  # type: ignore[no-untyped-def]
    cli, tiny_file: Path
) -> None:
    """One spelling across the CLI: ``--compile/--no-compile`` on bench as on deploy; the
    last one given wins, and bench's default is not to compile."""
    args = ["bench", f"{tiny_file}:tiny", "--runs", "2", "--no-memory", "--no-limit", "--json"]
    proc = cli(*args, "--compile", "--no-compile", "--variants", "fp32,naive-bf16", "--no-skip")
    assert proc.returncode == 0, proc.stderr
    names = [r["variant"] for r in json.loads(proc.stdout)["results"]]
    assert names == ["fp32", "naive-bf16"]
    assert "--compile / --no-compile" in cli("bench", "--help").stdout
    assert "--compile / --no-compile" in cli("deploy", "--help").stdout
