"""Rendering of diagnoses and preflights: rich tables, and a PNG plot of error by module."""

from __future__ import annotations

import math
import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from halfprec.diagnose import Diagnosis
from halfprec.diagnose.inputs import input_rounding_note
from halfprec.dtypes import dtype_name
from halfprec.preflight import Preflight
from halfprec.report.common import comparison_table, fit_table, fmt_float, make_console
from halfprec.report.plot import new_figure, save_png


def _err(x: float | None) -> str:
    if x is None:
        return "not reached"
    return fmt_float(x, ".2e") if not math.isinf(x) else "[red]inf/NaN[/]"


def diagnosis_table(diag: Diagnosis, top: int = 15) -> Table:
    """The worst offenders: raising and inf/NaN modules first, then by local error."""
    culprit = diag.culprit
    first = diag.divergence.module if diag.divergence is not None else None
    table = Table(
        title=f"worst {min(top, len(diag.modules))} of {len(diag.modules)} modules "
        f"({dtype_name(diag.dtype)} vs fp32, {diag.half_model} half model)",
        title_justify="left",
    )
    for col in ("#", "module", "type", "calls", "fp32 max|x|", "local err", "accum err", "flags"):
        table.add_column(col, justify="left" if col in ("module", "type", "flags") else "right")
    for m in diag.worst(top):
        mark = ""
        if m.name == culprit:
            mark = " [bold red]<- culprit[/]"
        elif m.name == first:
            mark = " [yellow]<- first divergence[/]"
        table.add_row(
            str(m.index),
            m.display_name + mark,
            m.type,
            str(m.calls),
            fmt_float(m.fp32_max_abs),
            "[red]raises[/]" if m.local_exception else _err(m.local_error),
            "[red]raises[/]" if m.half_exception else _err(m.accumulated_error),
            ", ".join(m.flags),
        )
    return table


def print_diagnosis(diag: Diagnosis, top: int = 15, console: Console | None = None) -> None:
    con = console or make_console()
    con.print(fit_table(diagnosis_table(diag, top), con))
    d = diag.divergence
    if d is None:
        con.print(
            f"[green]no divergence[/]: every module stays within relative error "
            f"{diag.threshold:.3g} and finite"
        )
    else:
        con.print(
            f"[bold]first divergence[/]: {d.module or '(model)'} ({d.type}, call {d.call}, "
            f"batch {d.batch}): {d.reason}"
        )
        con.print(
            f"[bold red]culprit[/]: {d.culprit or '(model)'} ({d.culprit_type}): {d.culprit_reason}"
        )
        if d.culprit_op:
            con.print(f"[bold red]culprit op[/]: {d.culprit_op}")
    if diag.output.outputs:
        con.print(fit_table(comparison_table(diag.output, title="model outputs"), con))
    for p in diag.output.problems:
        con.print(f"[red]problem:[/] {p}")
    note = input_rounding_note(diag.input_rounding)
    if note is not None:
        con.print(f"[bold red]inputs:[/] {escape(note)}")
    con.print(f"diagnosed {diag.batches} batch(es) in {diag.seconds:.2f} s")


def plot_diagnosis(diag: Diagnosis, path: str | os.PathLike[str], title: str = "") -> None:
    """PNG: local and accumulated relative error of every module, in execution order.

    inf/NaN and exceptions are drawn at the top of the axis; the threshold is a dashed line,
    the culprit a red vertical line.
    """
    mods = diag.modules
    finite = [
        v
        for m in mods
        for v in (m.local_error, m.accumulated_error)
        if v is not None and math.isfinite(v) and v > 0
    ]
    floor = min(finite, default=1e-6) / 2
    top = max(max(finite, default=1.0), diag.threshold) * 20

    def y(v: float | None, raised: bool) -> float:
        if raised or v is None or not math.isfinite(v):
            return top
        return max(v, floor)

    xs = list(range(len(mods)))
    fig = new_figure(max(8, min(24, len(mods) * 0.08)), 4.5)
    ax = fig.subplots()
    local = [y(m.local_error, bool(m.local_exception)) for m in mods]
    acc = [y(m.accumulated_error, bool(m.half_exception)) for m in mods]
    reached = [i for i, m in enumerate(mods) if m.reached or m.half_exception]
    ax.scatter(xs, local, s=10, label="local (own code in half)", color="tab:blue")
    ax.plot(
        reached,
        [acc[i] for i in reached],
        lw=1,
        marker=".",
        ms=4,
        label="accumulated (full half run)",
        color="tab:orange",
    )
    ax.axhline(diag.threshold, ls="--", color="gray", lw=1, label="threshold")
    ax.axhline(top, ls=":", color="red", lw=0.8)
    ax.text(0, top, " inf/NaN or raised", va="bottom", fontsize=8, color="red")
    if diag.culprit is not None:
        idx = next((i for i, m in enumerate(mods) if m.name == diag.culprit), None)
        if idx is not None:
            ax.axvline(idx, color="red", lw=1)
            ax.annotate(
                f"culprit: {mods[idx].display_name}",
                (idx, diag.threshold),
                xytext=(5, 10),
                textcoords="offset points",
                fontsize=8,
                color="red",
            )
    ax.set_yscale("log")
    ax.set_xlabel("module, in execution order")
    ax.set_ylabel("relative error vs fp32")
    ax.set_title(title or f"halfprec diagnose: {dtype_name(diag.dtype)} vs fp32")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    save_png(fig, path, dpi=120)


def print_preflight(result: Preflight, console: Console | None = None) -> None:
    con = console or make_console()
    name = dtype_name(result.dtype)
    if not result.findings:
        scope = "parameters, buffers, eps" + (" and fills" if result.forward_checked else "")
        con.print(f"[green]preflight ({name})[/]: nothing found in {scope}")
        return
    table = Table(title=f"preflight for {name}", title_justify="left")
    for col in ("kind", "module", "type", "finding", "convert handles it"):
        table.add_column(col)
    for f in result.findings:
        detail = f.detail + (f" [dim]({f.location})[/]" if f.location else "")
        table.add_row(
            f.kind,
            f.module or "(model)",
            f.module_type,
            detail,
            "[green]yes[/]" if f.handled else "[red]no[/]",
        )
    con.print(table)
    if not result.forward_checked:
        con.print("[dim]fill constants not checked: no inputs were given[/]")
