"""Rendering of tune results: the chosen islands, the variants, the search cost."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from halfprec.dtypes import dtype_name
from halfprec.report.common import fit_table, human_time, make_console
from halfprec.tune import TuneReport


def print_tune(report: TuneReport, console: Console | None = None) -> None:
    con = console or make_console()
    table = Table(title="tune variants", title_justify="left")
    columns = (
        "dtype",
        "meets tolerance",
        "fp32 islands",
        "fp32 share",
        "forward passes",
        "latency",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("dtype", "fp32 islands") else "right")
    for v in report.variants:
        islands = ", ".join(v.keep_fp32) if v.keep_fp32 else "(none beyond defaults)"
        table.add_row(
            dtype_name(v.dtype),
            "[green]yes[/]" if v.passed else f"[red]no[/] {v.note}",
            islands if v.passed else "-",
            f"{100 * v.fp32_share:.2f}%" if v.passed else "-",
            str(v.passes),
            human_time(v.latency),
        )
    con.print(fit_table(table, con))
    for v in report.variants:
        div = v.diagnosis.divergence if v.diagnosis is not None else None
        if div is not None:
            op = f"; op {div.culprit_op}" if div.culprit_op else ""
            con.print(
                f"{dtype_name(v.dtype)} before tuning: culprit {div.culprit or '(model)'} "
                f"({div.culprit_type}): {div.culprit_reason}{op}"
            )
    for ref in report.op_islands:
        con.print(f"op island: {ref}")
    for name in report.fp32_outputs:
        con.print(f"fp32 hand-off: {name} hands its outputs on in fp32")
    if report.passed:
        n_scaled = sum(r.scaled for r in report.op_islands)
        scaled = f" ({n_scaled} of them scaled half GEMMs)" if n_scaled else ""
        ops = f" and {len(report.op_islands)} op islands{scaled}" if report.op_islands else ""
        flops = report.fp32_flops_share
        flops_text = f", {100 * flops:.2f}% of FLOPs" if flops is not None else ""
        if report.flops_unavailable:
            flops_text = f", FLOPs n/a ({report.flops_unavailable})"
        con.print(
            f"[green]PASS[/]: {dtype_name(report.dtype)} with {len(report.keep_fp32)} extra "
            f"fp32 islands{ops}, {100 * report.fp32_share:.2f}% of parameters{flops_text} in "
            f"fp32 ({report.reason})"
        )
    elif report.calibrated:
        con.print(f"[red]FAIL[/]: {report.reason}; no recipe written")
    else:
        notes = "; ".join(f"{dtype_name(v.dtype)}: {v.note}" for v in report.variants if v.note)
        con.print(f"[red]FAIL[/]: no fp32 islands meet the tolerance ({notes}); no recipe written")
    cmp = report.confirmation
    if cmp is not None:
        verdict = "[green]PASS[/]" if cmp.passed else "[red]FAIL[/]"
        con.print(
            f"calibration: {'PASS' if report.calibrated else 'FAIL'} on {report.batches} "
            f"batch(es); confirmation: {verdict} on {cmp.batches} batch(es) tune never saw"
        )
    for note in report.notes:
        con.print(f"note: {note}")
    in_variants = sum(v.passes for v in report.variants)
    con.print(
        f"{report.passes} forward passes on {report.batches} batch(es) in "
        f"{human_time(report.seconds)}: {in_variants} in the variants above, "
        f"{report.passes - in_variants} for the fp32 reference and its check"
    )
