"""Rendering of results: rich tables for people, JSON for machines.

Results are plain dataclasses elsewhere; this module only turns them into text.
"""

from __future__ import annotations

import math

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table

from halfprec.check import CheckResult
from halfprec.compare import Comparison
from halfprec.convert.core import ConversionReport
from halfprec.dtypes import dtype_name
from halfprec.generate import Generation
from halfprec.timing import spread_text

__all__ = [
    "comparison_table",
    "print_check",
    "human_bytes",
    "fmt_float",
    "make_console",
    "human_time",
    "fit_table",
]


def make_console() -> Console:
    """A console that keeps tables readable when output is piped (no 80-column squeeze)."""
    con = Console()
    if not con.is_terminal:
        con = Console(width=140)
    return con


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} GiB"


def fmt_float(x: float | None, spec: str = ".3g") -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def human_time(seconds: float | None) -> str:
    """``4.33 s``, ``12.5 ms``, ``830 us``: three significant digits in a fitting unit."""
    if seconds is None or math.isnan(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale or unit == "us":
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
    return f"{seconds:.3g} s"


def fit_table(table: Table, console: Console) -> RenderableType:
    """``table`` if it fits ``console``'s width, else one stacked two-column table per
    row (column name, value), so that no cell is cut to ``…``."""
    wide = console.options.update_width(100_000)
    if Measurement.get(console, wide, table).maximum <= console.width:
        return table
    headers = [str(c.header) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    parts: list[RenderableType] = []
    if table.title:
        parts.append(str(table.title))
    for row in range(table.row_count):
        stacked = Table(show_header=False, box=None, padding=(0, 1))
        stacked.add_column(style="bold")
        stacked.add_column(overflow="fold")
        for name, column in zip(headers, cells, strict=True):
            stacked.add_row(name or "", column[row])
        parts.append(stacked)
    if table.caption:
        parts.append(str(table.caption))
    return Group(*parts)


def comparison_table(cmp: Comparison, title: str = "fp32 vs half") -> Table:
    table = Table(title=title, title_justify="left", caption="shape: the first batch's")
    for col in (
        "output",
        "shape",
        "max abs",
        "max rel",
        "cosine",
        "SQNR dB",
        "argmax",
        "non-finite",
        "ok",
    ):
        table.add_column(col, justify="left" if col in ("output", "shape") else "right")
    for o in cmp.outputs:
        table.add_row(
            o.path,
            "x".join(map(str, o.shape)),
            fmt_float(o.max_abs),
            fmt_float(o.max_rel),
            f"{o.cosine:.6f}",
            fmt_float(o.sqnr_db, ".1f"),
            fmt_float(o.argmax_agreement, ".3f"),
            str(o.nonfinite),
            "[green]yes[/]" if o.passed else "[red]NO[/]",
        )
    return table


def print_check(result: CheckResult, console: Console | None = None) -> None:
    con = console or make_console()
    conv = result.conversion
    con.print(f"[bold]{result.name}[/]: {dtype_name(conv.dtype)} — {conv.reason}")
    n = result.comparison.batches
    title = f"fp32 vs half over {n} batch(es)"
    con.print(fit_table(comparison_table(result.comparison, title=title), con))
    for problem in result.comparison.problems:
        con.print(f"[red]problem:[/] {problem}")
    for o in result.comparison.outputs:
        for f in o.failures:
            con.print(f"[red]{o.path}:[/] {f}")
    size = Table(title="size and speed", title_justify="left")
    for col in ("", "fp32", dtype_name(conv.dtype), "ratio"):
        size.add_column(col, justify="right")
    size.add_row(
        "model bytes",
        human_bytes(conv.bytes_before),
        human_bytes(conv.bytes_after),
        f"{conv.bytes_after / conv.bytes_before:.2f}x" if conv.bytes_before else "-",
    )
    speed = result.speed
    if speed is not None and result.latency_fp32 is not None and result.latency_half is not None:
        lat32, lat_half = result.latency_fp32.median, result.latency_half.median
        size.add_row("median latency", human_time(lat32), human_time(lat_half), "")
        size.add_row("speed per paired round", "", "", spread_text(speed))
    con.print(fit_table(size, con))
    if speed is not None:
        con.print(
            "speed: the median of the per-round ratios fp32/half (each round times both, back "
            "to back), which load hits alike; not the ratio of the two median latencies"
        )
    if result.generation is not None:
        print_generation(result.generation, con)
    con.print(fp32_text(conv))
    verdict = "[green]PASS[/]" if result.passed else "[red]FAIL[/]"
    con.print(f"{verdict}: {result.comparison.reason}")
    con.print(f"tolerance: {_tol_text(result.comparison)}")
    con.print(f"reference: {result.comparison.reference}")


def fp32_text(conv: ConversionReport) -> str:
    """What stays fp32: the islands, the share of parameters, and the small tensors kept
    by ``Recipe.fp32_params_up_to`` outside them."""
    text = f"fp32 islands: {len(conv.islands)} modules, {100 * conv.fp32_share:.2f}% of parameters"
    if conv.small_fp32:
        text += (
            f" (with {len(conv.small_fp32)} small parameters/buffers outside islands, "
            f"{human_bytes(conv.small_fp32_bytes)}: Recipe.fp32_params_up_to)"
        )
    if conv.fp32_outputs:
        text += f"; outputs handed on in fp32: {', '.join(conv.fp32_outputs)}"
    return text


def print_generation(gen: Generation, con: Console) -> None:
    """Greedy-decoding agreement in one paragraph."""
    steps = ", ".join("-" if d is None else str(d) for d in gen.first_divergence)
    con.print(
        f"greedy generation, {gen.new_tokens} new tokens from {len(gen.first_divergence)} "
        f"prompt(s): {100 * gen.agreement:.1f}% of half tokens agree with fp32; "
        f"{gen.diverged} prompt(s) diverge (first divergence step per prompt: {steps}); "
        f"mean |log-prob difference| {gen.mean_logprob_diff:.4f}"
    )


def _tol_text(cmp: Comparison) -> str:
    t = cmp.tolerance
    parts = []
    if t.min_cosine is not None:
        parts.append(f"cosine >= {t.min_cosine}")
    if t.min_sqnr_db is not None:
        parts.append(f"SQNR >= {t.min_sqnr_db} dB")
    if t.max_rel_error is not None:
        parts.append(f"max rel <= {t.max_rel_error}")
    parts.append("no inf/NaN where fp32 is finite")
    return ", ".join(parts)
