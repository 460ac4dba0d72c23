"""``halfprec lint PATH... [--fix] [--diff]``: static dtype-leak rules for forward code.

Exit codes: 0 clean, 1 findings left, 2 usage error (unknown code, missing path, a file
to fix that cannot be written).

``--fix`` is all-or-nothing where it can be: every file to rewrite is checked first, and a
read-only one (no write permission bit, or one this user may not write) or one in a folder
that cannot take the new file is refused, as ruff and black refuse, before any file is
written. If a write still fails midway (a full disk), the error says which files were
rewritten and which were not.
"""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path

import click

from halfprec.atomic import resolve_target, write_bytes_atomic
from halfprec.cli.options import finish
from halfprec.errors import HalfprecError
from halfprec.leaks.lint import LintReport, fixable, lint, load_config
from halfprec.leaks.lint.rules import FIX_UNSAFE
from halfprec.leaks.lint.source import split_lines


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
                split_lines(r.old_source, keepends=True),
                split_lines(r.new_source, keepends=True),
                fromfile=r.path if Path(r.path).is_absolute() else f"a/{r.path}",
                tofile=r.path if Path(r.path).is_absolute() else f"b/{r.path}",
            )
        )
    return "".join(chunks)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--fix",
    is_flag=True,
    help="Rewrite fixable findings in place; only the fixed spans change (encoding, line "
    "endings and the rest stay byte for byte).",
)
@click.option(
    "--unsafe-fixes",
    is_flag=True,
    default=None,
    help="Also apply fixes that may change fp32 values (HP301: -1e9 -> "
    "torch.finfo(x.dtype).min; x.new_zeros(...) where x's dtype is only guessed).",
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
        _write_fixes(report)

    def render() -> None:
        if diff:
            click.echo(_diff(report), nl=False)
        for finding in report.findings:
            click.echo(finding.render(fixable(finding, config)))
        _summary(
            report,
            config_fixable=sum(fixable(f, config) for f in report.findings),
            wrote=fix and not diff,
            unsafe_left=0
            if config.unsafe_fixes
            else sum(f.fix_safety == FIX_UNSAFE for f in report.findings),
        )

    changed = diff and any(r.new_source is not None for r in report.files)
    finish(report.to_json(), as_json, render, not (report.findings or changed))


def _unwritable(path: Path) -> str | None:
    """Why ``--fix`` must not rewrite ``path``, or None."""
    target = resolve_target(path)
    mode = target.stat().st_mode
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(target, os.W_OK):
        return "read-only file"
    if not os.access(target.parent, os.W_OK | os.X_OK):
        return "its folder is not writable"
    return None


def _write_fixes(report: LintReport) -> None:
    todo = [r for r in report.files if r.new_bytes is not None]
    refused = [f"{r.path} ({why})" for r in todo if (why := _unwritable(Path(r.path)))]
    if refused:
        raise HalfprecError(
            f"lint --fix cannot rewrite {', '.join(refused)}; no file was written: make "
            "them writable (chmod u+w) or leave them out of PATHS"
        )
    for i, r in enumerate(todo):
        assert r.new_bytes is not None  # filtered above
        try:
            write_bytes_atomic(r.path, r.new_bytes)
        except OSError as exc:
            done = ", ".join(t.path for t in todo[:i]) or "none"
            left = ", ".join(t.path for t in todo[i:])
            why = exc.strerror or str(exc)
            raise HalfprecError(
                f"lint --fix could not write {r.path} ({why}); rewritten: {done}; not "
                f"written: {left}; free the problem and run lint --fix again"
            ) from exc


def _summary(report: LintReport, config_fixable: int, wrote: bool, unsafe_left: int) -> None:
    # with --diff the fixed findings leave report.findings but are still in the code
    found = len(report.findings) + (0 if wrote else report.fixed)
    files = len(report.files)
    parts = [
        f"{found} finding{'s' if found != 1 else ''} in {files} file{'s' if files != 1 else ''}"
    ]
    if report.fixed:
        parts.append(f"{report.fixed} {'fixed' if wrote else 'fixable (diff above)'}")
    if config_fixable and not report.fixed:
        parts.append(f"{config_fixable} fixable with --fix")
    if unsafe_left:
        parts.append(f"{unsafe_left} more with --unsafe-fixes")
    click.echo("; ".join(parts) + ".", err=True)
