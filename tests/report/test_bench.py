"""report.bench: the bench table and the auto line print each ratio with its spread, and no
ranking the spread does not support (timings injected into a real result)."""

from __future__ import annotations

import io

import torch
from rich.console import Console
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.bench.results import BenchResult
from halfprec.report.bench import markdown_table, print_bench
from halfprec.timing import Timing


def _result(fp32: tuple[float, ...], half: tuple[float, ...]) -> BenchResult:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
    cfg = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None)
    result = benchmark(model, torch.randn(4, 16), variants=["naive-bf16"], bench=cfg)
    rows = {r.name: r for r in result.results}
    rows["fp32"].timing, rows["naive-bf16"].timing = Timing(fp32), Timing(half)
    rows["naive-bf16"].reference_timing = Timing(fp32)  # one pair: fp32's calls in it
    return result


def _printed(result: BenchResult) -> list[str]:
    out = io.StringIO()
    print_bench(result, Console(file=out, width=250, color_system=None))
    return [line for line in out.getvalue().splitlines() if "naive-bf16" in line]


def test_noisy_rounds_are_too_noisy_to_rank_in_the_table_and_the_auto_line() -> None:
    lines = _printed(_result((1.0, 0.9, 1.1, 2.0, 3.0), (2.0, 1.0, 1.0, 1.0, 1.0)))
    assert lines and all("faster" not in line and "slower" not in line for line in lines)
    assert any("too noisy to rank (IQR 0.90-2.00x over 5 rounds)" in line for line in lines)


def test_a_steady_ratio_is_ranked_with_its_spread() -> None:
    result = _result((2.0, 20.0, 4.0), (1.0, 10.0, 2.0))
    assert any("2.00x faster (IQR 2.00-2.00x over 3 rounds)" in x for x in _printed(result))
    assert "2.00x faster (IQR 2.00-2.00x over 3 rounds)" in markdown_table(result)


def test_nothing_is_called_fastest_from_two_rounds() -> None:
    two = _printed(_result((12.0, 12.0), (1.0, 1.0)))
    assert two and not any("fastest" in line for line in two)
    assert any("ahead within tolerance after only 2 rounds" in line for line in two)
    three = _printed(_result((12.0, 12.0, 12.0), (1.0, 1.0, 1.0)))
    assert any("fastest within tolerance overall: naive-bf16" in line for line in three)
