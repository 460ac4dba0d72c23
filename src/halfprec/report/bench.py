"""Rendering of :class:`~halfprec.bench.BenchResult`: a rich table, a PNG chart, JSON."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from halfprec.atomic import ensure_folder
from halfprec.bench.phases import cpu_text
from halfprec.bench.results import BenchResult, VariantResult, fastest_variant, too_noisy
from halfprec.bench.spread import variant_speed
from halfprec.dtypes import dtype_name
from halfprec.errors import HalfprecError
from halfprec.report.common import (
    fit_table,
    fmt_float,
    human_bytes,
    human_time,
    make_console,
)
from halfprec.report.plot import new_figure, save_png
from halfprec.timing import ratio_text, spent_text, spread_text


def _ms(x: float | None) -> str:
    return human_time(x)


def _memory(r: VariantResult) -> str:
    m = r.memory
    if m is None:
        return "-"
    if m.method == "failed":
        return "failed"
    return f"{human_bytes(m.peak_bytes)} (+{human_bytes(m.delta_bytes)})"


def _accuracy(r: VariantResult) -> str:
    cmp = r.comparison
    if r.variant.kind == "fp32" and not r.variant.compiled:
        return "reference"
    if cmp is None or not cmp.outputs:
        return "-" if cmp is None else "error"
    return f"{cmp.worst_cosine:.6f} {'ok' if cmp.passed else 'FAIL'}"


def _speed(result: BenchResult, r: VariantResult) -> str:
    """The speedup with its spread over the rounds shared with fp32; a capped variant's one
    call (or a capped fp32's) is never ranked."""
    speed = variant_speed(result, r)
    if speed is None:
        return "-" if r.speedup is None else ratio_text(r.speedup)
    return spread_text(speed) + ("*" if r.status == "capped" else "")


def _efficiency(r: VariantResult) -> str:
    """The share of the eager GEMM ratio reached; above it no share is claimed (a warning
    says why)."""
    if r.efficiency is None:
        return "-"
    return "above (see warnings)" if r.efficiency > 1.0 else f"{r.efficiency:.0%}"


def _status(r: VariantResult) -> str:
    """The row's status with its note and compile time: the markdown table's last cell, the
    terminal table's footnote."""
    status = r.status if not r.note else f"{r.status}: {r.note}"
    if r.compile_s is not None:
        status += f" (compiled in {r.compile_s:.1f} s)"
    return status


def _full_row(result: BenchResult, r: VariantResult) -> list[str]:
    t = r.timing
    return [
        r.name,
        _ms(r.median_s),
        _ms(None if t is None or r.status != "ok" else t.p90),
        fmt_float(r.throughput, ".1f"),
        _speed(result, r),
        _efficiency(r),
        human_bytes(r.model_bytes) if r.model_bytes else "-",
        _memory(r),
        _accuracy(r),
        _status(r),
    ]


_FULL_COLUMNS = (
    "variant",
    "median",
    "p90",
    "{unit}/s",
    "speedup",
    "of eager GEMM ratio",
    "model",
    "peak memory (+run)",
    "cosine vs fp32",
    "status",
)
# The terminal table: one row per variant, the columns a reader compares, so that it stays
# one table in a 140-column pipe; p90, throughput, efficiency and the run's own memory are in
# --json and the markdown table, a row's note is a numbered footnote under the table.
_COLUMNS = ("variant", "median", "speedup", "cosine vs fp32", "model", "peak memory", "status")


def _peak(r: VariantResult) -> str:
    m = r.memory
    return "-" if m is None else "failed" if m.method == "failed" else human_bytes(m.peak_bytes)


def bench_table(result: BenchResult, batch_size: int) -> tuple[Table, list[str]]:
    """The variants at ``batch_size`` (rows) by what was measured (columns), and the
    footnotes its status cells point to."""
    title = f"{result.model} on {result.device}, batch {batch_size}"
    table = Table(title=title, title_justify="left")
    for col in _COLUMNS:
        table.add_column(col, justify="left" if col in ("variant", "status") else "right")
    notes: list[str] = []
    for r in result.at(batch_size):
        status = r.status
        if r.note or r.compile_s is not None:
            notes.append(f"[{len(notes) + 1}] {r.name}: {_status(r)}")
            status += f" [{len(notes)}]"
        model = human_bytes(r.model_bytes) if r.model_bytes else "-"
        row = [r.name, _ms(r.median_s), _speed(result, r), _accuracy(r), model, _peak(r), status]
        table.add_row(*row)
    return table, notes


def markdown_table(result: BenchResult) -> str:
    """Every column, every batch size, as Markdown, for README files."""
    head = ["batch", *(c.format(unit=result.unit) for c in _FULL_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result.results:
        lines.append("| " + " | ".join([str(r.batch_size), *_full_row(result, r)]) + " |")
    return "\n".join(lines)


def progress_line(r: VariantResult, step: int, total: int, seconds: float) -> str:
    """``bench [3/8] naive-bf16, batch 8: ok, cosine 0.999986 (4.1 s)``: one finished
    variant, as bench prints it on stderr while it works."""
    done = _status(r) if r.status != "ok" else "ok"
    cmp = r.comparison
    if cmp is not None and cmp.outputs and r.variant.kind != "fp32":
        done += f", cosine {cmp.worst_cosine:.6f}" + ("" if cmp.passed else " FAIL")
    return f"bench [{step}/{total}] {r.name}, batch {r.batch_size}: {done} ({seconds:.1f} s)"


FASTEST_ROUNDS = 3
"""The fewest timed rounds behind the word "fastest" (the race's own ``min_rounds``)."""


def _best_words(best: VariantResult) -> str:
    """ "fastest within tolerance overall", or, over fewer than :data:`FASTEST_ROUNDS`
    rounds (a race settled early), what was measured and no more."""
    rounds = len(best.timing.samples) if best.timing is not None else 0
    if best.variant.kind == "fp32" or rounds >= FASTEST_ROUNDS:
        return "fastest within tolerance overall"
    return (
        f"ahead within tolerance after only {rounds} round{'s' if rounds != 1 else ''} "
        "(too few to rank it first; --no-race times every variant --runs times)"
    )


def print_bench(result: BenchResult, console: Console | None = None) -> None:
    con = console or make_console()
    con.print(f"[bold]machine[/]: {result.machine.summary()}")
    for size in result.batch_sizes:
        table, notes = bench_table(result, size)
        con.print(fit_table(table, con))
        for note in notes:
            con.print(note, markup=False)
        limits = result.limits.get(size, {})
        if limits:
            con.print(
                f"batch {size}: eager GEMM ratio (half/fp32 speed of the model's own matrix "
                "products in eager kernels; compiled variants can exceed it): "
                + ", ".join(
                    f"{dtype_name(dt)} {ratio_text(lim.ratio)}"
                    + (" (probe)" if lim.method == "probe" else "")
                    for dt, lim in limits.items()
                )
            )
        auto = fastest_variant(result, size)
        best = fastest_variant(result, size, kinds=("fp32", "naive", "autocast", "halfprec"))
        con.print(
            f"batch {size}: auto would choose [bold]{auto.name}[/]"
            + _against_fp32(result, auto)
            + f"; {_best_words(best)}: {best.name}"
            + _against_fp32(result, best)
        )
        for r, speed in too_noisy(result, size, kinds=("fp32", "naive", "autocast", "halfprec")):
            con.print(
                f"batch {size}: not chosen: {r.name}, median {speed.median:.2f}x but "
                f"{spread_text(speed)} against fp32"
            )
    if any(r.status == "capped" for r in result.results):
        con.print("* capped: timed once because one call exceeded the per-call cap")
    for w in result.warnings:
        con.print(f"[yellow]warning:[/] {w}")
    if result.seconds:
        budget = "none" if result.budget_s is None else f"{result.budget_s:g} s"
        con.print(f"{spent_text('bench', result.seconds)}; time budget {budget}")
    if result.cpu_seconds:
        con.print(cpu_text(result.cpu_seconds))


def _against_fp32(result: BenchResult, r: VariantResult) -> str:
    speed = variant_speed(result, r)
    return "" if speed is None else f" ({spread_text(speed)} against fp32)"


def check_plot_path(path: str | os.PathLike[str]) -> Path:
    """Fail before measuring when the chart could not be written."""
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise HalfprecError(f"--plot {p}: the chart is a PNG; give a path ending in .png")
    ensure_folder(p)  # a path that cannot be written, before anything is measured
    return p


def write_chart(
    results: list[BenchResult], path: str | os.PathLike[str], *, first_size_only: bool = False
) -> Path:
    """Speedup over fp32 (left) and peak memory or model bytes (right) per variant, one
    group of bars per model and batch size (``first_size_only``: per model). Atomic."""
    p = check_plot_path(path)
    groups = [
        (res, size)
        for res in results
        for size in (res.batch_sizes[:1] if first_size_only else res.batch_sizes)
    ]
    names = list(dict.fromkeys(r.name for res in results for r in res.results))
    tall = 2 + 0.35 * len(names) * max(1, len(groups)) ** 0.5
    fig = new_figure(11, tall)
    ax_speed, ax_mem = fig.subplots(1, 2)
    height = 0.8 / max(1, len(groups))
    for gi, (res, size) in enumerate(groups):
        rows = {r.name: r for r in res.at(size)}
        label = f"{res.model} b{size}"
        ys = [i + gi * height for i in range(len(names))]
        speed = [rows[n].speedup or 0.0 if n in rows else 0.0 for n in names]
        size_mib = [rows[n].model_bytes / 2**20 if n in rows else 0.0 for n in names]
        bars = ax_speed.barh(ys, speed, height=height, label=label)
        ax_mem.barh(ys, size_mib, height=height, color=bars.patches[0].get_facecolor())
        peaks = [(y, _peak_mib(rows.get(n))) for y, n in zip(ys, names, strict=True)]
        marked = [(y, m) for y, m in peaks if m is not None]
        if marked:
            ax_mem.plot([m for _, m in marked], [y for y, _ in marked], "k|", markersize=9)
    ticks = [i + 0.4 - height / 2 for i in range(len(names))]
    for ax in (ax_speed, ax_mem):
        ax.set_yticks(ticks)
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
    ax_speed.axvline(1.0, color="black", linewidth=0.8)
    ax_speed.set_xlabel("speedup over fp32 (median latency)")
    ax_mem.set_xlabel("model MiB (bars), peak memory MiB (| where measured)")
    ax_speed.legend(fontsize=7, loc="lower right")
    machine = results[0].machine if results else None
    if machine is not None:
        fig.suptitle(f"halfprec bench on {machine.name}", fontsize=9)
    fig.tight_layout()
    save_png(fig, p, dpi=80)
    return p


def _peak_mib(r: VariantResult | None) -> float | None:
    if r is None or r.memory is None or r.memory.method == "failed":
        return None
    return r.memory.peak_bytes / 2**20
