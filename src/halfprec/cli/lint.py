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
from typing import TYPE_CHECKING

import click

from halfprec.atomic import resolve_target, write_bytes_atomic
from halfprec.cli.options import finish
from halfprec.errors import HalfprecError

if TYPE_CHECKING:  # the lint itself is imported when it runs, not for --help
    from halfprec.leaks.lint import Finding, LintConfig, LintReport


def _codes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(c.strip() for c in value.split(",") if c.strip())


def _diff(report: LintReport) -> str:
    from halfprec.leaks.lint.source import split_lines

    chunks: list[str] = []
    for r in report.files:
        if r.new_source is None or r.old_source is None:
            continue
        for line in difflib.unified_diff(
            split_lines(r.old_source, keepends=True),
            split_lines(r.new_source, keepends=True),
            fromfile=r.path if Path(r.path).is_absolute() else f"a/{r.path}",
            tofile=r.path if Path(r.path).is_absolute() else f"b/{r.path}",
        ):
            # a last line without its newline is marked as diff and git mark it, so the
            # next line (or the summary) does not run on from it
            ended = line.endswith(("\n", "\r"))
            chunks.append(line if ended else f"{line}\n\\ No newline at end of file\n")
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
@click.option(
    "--select",
    show_default="select in pyproject.toml, else HP1,HP3",
    help="Comma-separated rule codes or prefixes to run; the upcast rules HP2 run only "
    "when selected.",
)
@click.option("--ignore", help="Comma-separated rule codes or prefixes to skip.")
@click.option("--json", "as_json", is_flag=True, help="Print findings as JSON.")
@click.option(
    "--output-format",
    type=click.Choice(["text", "json", "github"]),
    default="text",
    help="text (path:line:col: CODE message), json (as --json), or github (workflow "
    "commands: each finding an annotation on the pull request's diff).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=0),
    default=None,
    show_default="one per CPU from 200 files on, else 1",
    help="Lint in this many processes (0: one per CPU); the same findings in the same order.",
)
def command(
    paths: tuple[Path, ...],
    fix: bool,
    unsafe_fixes: bool | None,
    diff: bool,
    select: str | None,
    ignore: str | None,
    as_json: bool,
    output_format: str,
    jobs: int | None,
) -> None:
    """Find dtype leaks in the forward code of nn.Modules under PATHS.

    Suppress one line with `# halfprec: ignore[HP101]` or `# noqa: HP101` (a bare
    `# halfprec: ignore` or `# noqa`: every rule); set select, ignore, exclude and
    per-file-ignores in `[tool.halfprec.lint]` of pyproject.toml.
    """
    from halfprec.leaks.lint import fixable, lint, load_config

    config = load_config(
        paths[0], select=_codes(select), ignore=_codes(ignore), unsafe_fixes=unsafe_fixes
    )
    report = lint(paths, config, fix=fix or diff, jobs=jobs)
    if fix and not diff:
        _write_fixes(report)

    def render() -> None:
        if diff:
            click.echo(_diff(report), nl=False)
        for finding in report.findings:
            if output_format == "github":
                click.echo(github_annotation(finding))
            else:
                click.echo(finding.render(fixable(finding, config)))
        click.echo(summary(report, config, wrote=fix and not diff), err=True)

    changed = diff and any(r.new_source is not None for r in report.files)
    as_json = as_json or output_format == "json"
    finish(report.to_json(), as_json, render, not (report.findings or changed))


def _escape(text: str, prop: bool = False) -> str:
    """GitHub's escaping of a workflow command's message (and, with ``prop``, of a
    property value, where ``:`` and ``,`` separate)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def github_annotation(finding: Finding) -> str:
    """``::error file=...,line=...,col=...,title=HP101::message``: an annotation GitHub
    Actions shows on the line of the pull request's diff."""
    where = ",".join(
        [
            f"file={_escape(finding.path, prop=True)}",
            f"line={finding.line}",
            f"col={finding.col}",
            f"title={_escape(finding.code, prop=True)}",
        ]
    )
    return f"::error {where}::{_escape(f'{finding.code} {finding.message}')}"


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


def summary(report: LintReport, config: LintConfig, wrote: bool) -> str:
    """One line that splits the findings into parts that add up to their number:
    ``3 findings in 1 file: 2 fixed, 1 fixable only with --unsafe-fixes (...).``"""
    from halfprec.leaks.lint import fixable
    from halfprec.leaks.lint.rules import FIX_UNSAFE

    left = report.findings  # after --fix or --diff: those the fixes leave
    found = len(left) + report.fixed
    files = len(report.files)
    head = f"{found} finding{'s' if found != 1 else ''} in {files} file{'s' if files != 1 else ''}"
    fixable_now = sum(fixable(f, config) for f in left)
    unsafe = sum(f.fix_safety == FIX_UNSAFE and not fixable(f, config) for f in left)
    parts = [
        (report.fixed, "fixed" if wrote else "fixable (diff above)"),
        (fixable_now, "fixable with --fix"),
        (unsafe, "fixable only with --unsafe-fixes (the fix may change fp32 values)"),
        (len(left) - fixable_now - unsafe, "to fix by hand"),
    ]
    said = [f"{n} {what}" for n, what in parts if n]
    return f"{head}: {', '.join(said)}." if said else f"{head}."
