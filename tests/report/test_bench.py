"""report.bench: the bench table and the auto line print each ratio with its spread, and no
ranking the spread does not support (timings injected into a real result)."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterator

import torch
from rich.console import Console
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.bench.results import BenchResult
from halfprec.bench.variants import Variant
from halfprec.report.bench import markdown_table, print_bench, progress_line
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


def _lines(result: BenchResult, width: int) -> list[str]:
    out = io.StringIO()
    print_bench(result, Console(file=out, width=width, color_system=None))
    return out.getvalue().splitlines()


def test_one_table_with_a_row_per_variant_and_notes_as_footnotes() -> None:
    """A piped run is 140 columns wide (report.common.make_console): one horizontal table,
    the header naming every column on one line, each variant one row, a note a footnote."""
    result = _result((2.0, 20.0, 4.0), (1.0, 10.0, 2.0))
    naive = next(r for r in result.results if r.name == "naive-bf16")
    naive.note = "a long note that once widened the status column past the terminal's edge"
    lines = _lines(result, 140)
    header = next(line for line in lines if "variant" in line)
    for column in ("median", "speedup", "cosine vs fp32", "model", "peak memory", "status"):
        assert column in header, header
    rows = [line for line in lines if line.startswith("│")]
    assert [row.split()[1] for row in rows] == ["fp32", "naive-bf16"]
    assert "2.00x faster (IQR 2.00-2.00x over 3 rounds)" in rows[1] and "ok [1]" in rows[1]
    assert f"[1] naive-bf16: ok: {naive.note}" in lines


def test_busy_machine_is_one_warning_naming_every_spread_row() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
    cfg = BenchConfig(warmup=1, runs=4, memory="none", skip_slower_than=None, race=None)
    calls: dict[str, Iterator[float]] = {}

    def noisy(fn: Callable[[], object], variant: Variant) -> float:
        fn()  # every variant's calls alternate 1 s and 3 s: spread (3 - 1) / 2 = 100%
        return next(calls.setdefault(variant.name, itertools.cycle([1.0, 3.0])))

    variants = ["naive-bf16", "halfprec-bf16"]
    result = benchmark(model, torch.randn(4, 16), variants=variants, bench=cfg, timer=noisy)
    busy = [w for w in result.warnings if "distrust small ratios" in w]
    assert len(busy) == 1, result.warnings
    for name in ("fp32", "naive-bf16", "halfprec-bf16"):
        assert f"{name} @ batch 4 100%" in busy[0]


def test_progress_line_names_variant_batch_status_and_cosine() -> None:
    result = _result((2.0, 2.0, 2.0), (1.0, 1.0, 1.0))
    fp32, naive = result.results
    assert progress_line(fp32, 1, 2, 0.25) == "bench [1/2] fp32, batch 4: ok (0.2 s)"
    line = progress_line(naive, 2, 2, 3.0)
    assert line.startswith("bench [2/2] naive-bf16, batch 4: ok, cosine 0.99")
    naive.status, naive.note = "skipped", "bf16 is emulated here"
    assert "naive-bf16, batch 4: skipped: bf16 is emulated here" in progress_line(naive, 2, 2, 0)
