"""Rendering of an :class:`~halfprec.audit.AuditReport`: a rich table grouped by source
location (its JSON is the report's own ``to_json``). The report itself holds only data."""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table

from halfprec.dtypes import dtype_name
from halfprec.leaks.audit import AuditReport


def short_path(path: str) -> str:
    """``path`` relative to the working directory or to site-packages, when shorter."""
    marker = f"site-packages{os.sep}"
    if marker in path:
        return path.split(marker, 1)[1]
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def render_table(report: AuditReport, console: Console | None = None) -> None:
    """Print the leaks grouped by location, then a one-line summary."""
    console = console or Console()
    if not report.leaks:
        console.print(
            f"no dtype leaks in {dtype_name(report.dtype)} "
            f"({report.ops} ops over {report.batches} batch(es))"
        )
        return
    table = Table(title=f"dtype leaks ({dtype_name(report.dtype)})", show_lines=True)
    table.add_column("location", overflow="fold")
    table.add_column("kind")
    table.add_column("count", justify="right")
    table.add_column("what and fix", overflow="fold")
    for location, leaks in report.by_location().items():
        file, _, line = location.rpartition(":")
        where = f"{short_path(file)}:{line}\n[dim]{leaks[0].code}[/dim]"
        for i, leak in enumerate(leaks):
            kind = leak.kind
            if leak.recipe_field:
                kind += f"\n[dim]caused by the recipe: {leak.recipe_field}[/dim]"
            table.add_row(
                where if i == 0 else "",
                kind,
                str(leak.count),
                f"{leak.message}\n[green]fix:[/green] {leak.suggestion}",
            )
    console.print(table)
    total = sum(leak.count for leak in report.leaks)
    by_recipe = len(report.leaks) - len(report.problems)
    because = f" ({by_recipe} caused by the recipe, not the code)" if by_recipe else ""
    console.print(
        f"{len(report.leaks)} leak(s){because} at {len(report.by_location())} location(s), "
        f"{total} occurrence(s) over {report.batches} batch(es)"
    )
