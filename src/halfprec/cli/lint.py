"""``halfprec lint PATH... [--fix] [--diff]``: static dtype-leak rules for forward code.

Exit codes: 0 clean, 1 findings left, 2 usage error (unknown code, missing path).
"""

from __future__ import annotations

import difflib
from pathlib import Path

import click

from halfprec.atomic import write_text_atomic
from halfprec.cli.options import finish
from halfprec.leaks.lint import LintReport, fixable, lint, load_config


def _codes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(c.strip() for c in value.split(",") if c.strip())


def _diff(report: LintReport) -> str:
    chunks: list[str] = []
    for r in report.files:
        if r.new_source is None or r.old_source is None:
            continue
        chunks.extend(
            difflib.unified_diff(
                r.old_source.splitlines(keepends=True),
                r.new_source.splitlines(keepends=True),
                fromfile=r.path if Path(r.path).is_absolute() else f"a/{r.path}",
                tofile=r.path if Path(r.path).is_absolute() else f"b/{r.path}",
            )
        )
    return "".join(chunks)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--fix", is_flag=True, help="Rewrite fixable findings in place (libcst).")
@click.option(
    "--unsafe-fixes",
    is_flag=True,
    default=None,
    help="Also apply fixes that change fp32 values (HP301: -1e9 -> torch.finfo(x.dtype).min).",
)
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff; write nothing.")
@click.option("--select", help="Comma-separated rule codes or prefixes to run (default: HP).")
@click.option("--ignore", help="Comma-separated rule codes or prefixes to skip.")
@click.option("--json", "as_json", is_flag=True, help="Print findings as JSON.")
def command(
    paths: tuple[Path, ...],
    fix: bool,
    unsafe_fixes: bool | None,
    diff: bool,
    select: str | None,
    ignore: str | None,
    as_json: bool,
) -> None:
    """Find dtype leaks in the forward code of nn.Modules under PATHS.

    Suppress one line with `# halfprec: ignore[HP101]` (or a bare `# halfprec: ignore`);
    configure defaults in `[tool.halfprec.lint]` of pyproject.toml.
    """
    config = load_config(
        paths[0], select=_codes(select), ignore=_codes(ignore), unsafe_fixes=unsafe_fixes
    )
    report = lint(paths, config, fix=fix or diff)
    if fix and not diff:
        for r in report.files:
            if r.new_source is not None:
                write_text_atomic(r.path, r.new_source)

    def render() -> None:
        if diff:
            click.echo(_diff(report), nl=False)
        for finding in report.findings:
            click.echo(finding.render(fixable(finding, config)))
        _summary(
            report,
            config_fixable=sum(fixable(f, config) for f in report.findings),
            wrote=fix and not diff,
        )

    changed = diff and any(r.new_source is not None for r in report.files)
    finish(report.to_json(), as_json, render, not (report.findings or changed))


def _summary(report: LintReport, config_fixable: int, wrote: bool) -> None:
    found = len(report.findings)
    files = len(report.files)
    parts = [
        f"{found} finding{'s' if found != 1 else ''} in {files} file{'s' if files != 1 else ''}"
    ]
    if report.fixed:
        parts.append(f"{report.fixed} {'fixed' if wrote else 'fixable (shown above)'}")
    if config_fixable and not report.fixed:
        parts.append(f"{config_fixable} fixable with --fix")
    click.echo("; ".join(parts) + ".", err=True)
