"""Lint Python sources: parse with ``ast`` (fast), find forward paths, run the rule checks,
drop suppressed and unselected findings. Fixes are applied by :mod:`.fix` as text edits,
and files are read and written as bytes in their own encoding (:mod:`.source`).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import gc
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from halfprec.leaks.lint.casts import check_casts
from halfprec.leaks.lint.config import LintConfig
from halfprec.leaks.lint.constants import check_constants
from halfprec.leaks.lint.context import Check
from halfprec.leaks.lint.elsewhere import Helper, helper_findings, helpers_called, unique
from halfprec.leaks.lint.factories import check_factory
from halfprec.leaks.lint.findings import FileResult, Finding, Fix, LintReport
from halfprec.leaks.lint.flow import calls_of, walk_function
from halfprec.leaks.lint.imported import (
    alias_of,
    forward_of,
    function_of,
    imported_names,
    keyed_forward,
    method_of,
    module_function_of,
)
from halfprec.leaks.lint.memo import forget
from halfprec.leaks.lint.pipeline import held_in_package
from halfprec.leaks.lint.rules import FIX_NONE, FIX_SAFE
from halfprec.leaks.lint.scope import forward_paths, imports_of, program_of
from halfprec.leaks.lint.source import SourceError, decode_source, split_lines
from halfprec.leaks.lint.suppress import is_suppressed, suppressions
from halfprec.readfile import NotAFileError, kind_of, read_regular

__all__ = [
    "lint",
    "lint_source",
    "lint_file",
    "lint_paths",
    "iter_python_files",
    "fixable",
    "fix_text",
]

PARSE_ERROR = "HP000"
MAX_SOURCE_BYTES = 64 * 2**20  # a larger .py file is one HP000 finding, never read whole
_MAX_ROUNDS = 4
# each check with the prefix of the codes it reports: a check none of whose codes is enabled
# is not run (its findings would be dropped, after following each tensor: see .fate)
_CHECKS: list[tuple[Check, str]] = [
    (check_factory, "HP1"),
    (check_casts, "HP2"),
    (check_constants, "HP3"),
]
# forward paths start at a method named forward (scope.forward_paths); a file whose text
# has no `def forward` has none, so it is not parsed (a `\` line continuation may split it)
_DEF_FORWARD = re.compile(r"def(?:\s|\\)+forward\b")  # `\bdef` is checked by hand: fast
_WORD = re.compile(r"\w")
_UPCAST_CALL = re.compile(r"\.(?:float|double)\(")
_LONG_NUMBER = re.compile(r"\d(?:[eE][+-]?\d|\d{4})")  # \d[eE][+-]?\d or \d{5}
_SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".venv",
        "venv",
        "__pycache__",
        "node_modules",
        ".tox",
        "build",
        "dist",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
    }
)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while ``ast`` allocates trees: parsing creates
    hundreds of thousands of objects and no cycles, and the collector's passes over them make
    parsing 1.5-1.8x slower (measured on transformers' modeling files). A run pauses it for
    all its files: resumed after each, it walked the trees the run keeps (:mod:`.memo`)
    again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def lint_source(
    source: str, path: str = "<string>", config: LintConfig | None = None
) -> list[Finding]:
    """Findings of one source text, sorted by position. Code nested too deeply for
    Python's own parser or for the rules' walk is one HP000 finding, not an error."""
    try:
        with _gc_paused():
            return _lint_source(source, path, config)
    except RecursionError:
        return [
            Finding(
                path,
                1,
                1,
                PARSE_ERROR,
                "nested too deeply to analyse (Python's recursion limit); file skipped: "
                "split the deepest expression into several statements",
            )
        ]


def _lint_source(source: str, path: str, config: LintConfig | None) -> list[Finding]:
    config = config or LintConfig()
    if not _defines_forward(source):
        return []  # no forward path can exist: skip parsing (most of a file's time)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        line = exc.lineno or 1
        return [Finding(path, line, exc.offset or 1, PARSE_ERROR, f"cannot parse: {exc.msg}")]
    imports = imports_of(tree)
    if not imports.torch and not imports.functional:
        return []
    lines = split_lines(source)
    enabled = config.enabled_for(path)
    checks = checks_for(enabled)
    silenced = suppressions(source)
    seen: set[tuple[int, int, str, int, int]] = set()
    findings: list[Finding] = []
    hot = _hot_lines(source, lines, imports.torch)
    program = program_of(tree)
    calls = calls_of(program, imports, lines)
    # the file's imported names: read only when a class or another file's helper is sought
    names = functools.cache(lambda: imported_names(tree, source))
    calls.other = lambda cls: forward_of(path, names(), cls)
    calls.alias = lambda name: alias_of(path, names(), name)
    calls.function = lambda name: function_of(path, names(), name)
    calls.method = lambda cls, name: method_of(path, names(), cls, name)
    calls.module = lambda name, attr: module_function_of(path, names(), name, attr)
    calls.keyed = lambda key: keyed_forward(path, key)
    held = functools.partial(held_in_package, path)
    helpers: list[Helper] = []
    for fpath in forward_paths(tree, lines, program, held):
        if fpath.pipeline:
            continue  # a data-pipeline transform: its tensors are data-loader outputs
        helpers.extend(helpers_called(path, fpath, program, names, calls))
        ctx = walk_function(
            fpath.function,
            imports,
            lines,
            checks,
            facts=fpath.facts,
            is_forward=fpath.is_forward,
            hot_lines=hot,
            calls=calls,
        )
        for node, code, message, fix in ctx.found:
            line = getattr(node, "lineno", 1)
            col = ctx.char_col(line, getattr(node, "col_offset", 0)) + 1
            key = (
                line,
                col,
                code,
                getattr(node, "end_lineno", 0),
                getattr(node, "end_col_offset", 0),
            )
            if code not in enabled or key in seen or is_suppressed(silenced, line, code):
                continue
            seen.add(key)
            findings.append(
                Finding(path, line, col, code, message, fix if isinstance(fix, Fix) else None)
            )
    elsewhere = helper_findings(helpers, checks_for, config.enabled_for, _hot_lines)
    calls.close()  # the tree is then freed at once, not by a garbage-collector pass
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return findings + sorted(set(elsewhere), key=lambda f: (f.path, f.line, f.col, f.code))


def checks_for(enabled: frozenset[str]) -> list[Check]:
    """The rule checks that can report one of the ``enabled`` codes."""
    return [check for check, prefix in _CHECKS if any(c.startswith(prefix) for c in enabled)]


def _defines_forward(source: str) -> bool:
    """Whether ``source`` has the text ``def forward`` (``\\bdef\\s+forward\\b``)."""
    for match in _DEF_FORWARD.finditer(source):
        at = match.start()
        if at == 0 or not _WORD.match(source, at - 1):
            return True
    return False


def _hot_lines(source: str, lines: list[str], torch_names: frozenset[str]) -> frozenset[int]:
    """Lines on which some rule could fire: a torch name, ``.float(``/``.double(``, or a
    number literal of 5+ digits or with an exponent.

    No trigger spans a line end, so a few regex passes over the whole text, each starting
    with a literal or a digit (which ``re`` scans for fast), find the same lines as one
    search per line, several times faster; a match's line is the count of ``\\n`` before
    it. Text with ``\\r`` line ends is searched line by line."""
    names = sorted(torch_names | {"torch"})
    if "\r" in source:
        alias = "|".join(re.escape(n) for n in names)
        trigger = re.compile(rf"\b(?:{alias})\.|\.(?:float|double)\(|\d[eE][+-]?\d|\d{{5}}")
        return frozenset(i for i, line in enumerate(lines, start=1) if trigger.search(line))
    # `name.` not preceded by a word character is `\bname.`: the literal comes first
    patterns = [re.compile(rf"{re.escape(n)}\.(?<!\w{re.escape(n)}\.)") for n in names]
    starts = sorted(
        match.start()
        for pattern in (*patterns, _UPCAST_CALL, _LONG_NUMBER)
        for match in pattern.finditer(source)
    )
    hot: set[int] = set()
    line, pos = 1, 0
    for start in starts:
        line += source.count("\n", pos, start)
        pos = start
        hot.add(line)
    return frozenset(hot)


def fixable(finding: Finding, config: LintConfig) -> bool:
    """Whether ``--fix`` rewrites this finding under ``config``."""
    safety = finding.fix_safety
    return safety == FIX_SAFE or (safety != FIX_NONE and config.unsafe_fixes)


def fix_text(source: str, path: str, config: LintConfig) -> tuple[str, list[Finding]]:
    """``source`` with its fixable findings rewritten, and the findings left in it.

    Fixing runs until nothing fixable is left (a fix can uncover another, e.g. a template
    that becomes known), so one ``--fix`` reaches the fixed point. A round whose result does
    not parse is dropped.
    """
    from halfprec.leaks.lint.fix import apply_fixes

    findings = lint_source(source, path, config)
    for _ in range(_MAX_ROUNDS):
        todo = [f.fix for f in findings if fixable(f, config) and f.fix is not None]
        if not todo:
            break
        new = apply_fixes(source, todo)
        if new == source:
            break
        left = lint_source(new, path, config)
        if any(f.code == PARSE_ERROR for f in left):
            break
        source, findings = new, left
    return source, findings


def lint_file(path: Path, config: LintConfig, fix: bool = False) -> FileResult:
    """Lint one file; with ``fix`` the fixed file is in ``new_bytes`` (nothing is written).

    The file is decoded as Python decodes it (PEP 263 cookie, BOM); one that cannot be is
    reported as one HP000 finding and skipped.
    """
    name = str(path)
    try:  # a regular file only: a FIFO would block, a link to /dev/zero never end
        decoded = decode_source(read_regular(path, limit=MAX_SOURCE_BYTES))
    except OSError as exc:  # a FIFO, a dangling or looping link, too large, unreadable
        why = exc if exc.strerror is None else f"cannot read it ({exc.strerror})"
        return FileResult(name, [Finding(name, 1, 1, PARSE_ERROR, f"{why}; file skipped")])
    except SourceError as exc:
        return FileResult(name, [Finding(name, 1, 1, PARSE_ERROR, f"{exc}; file skipped")])
    return _lint_text(decoded.text, name, config, fix, decoded.encode)


def _lint_text(
    source: str, name: str, config: LintConfig, fix: bool, encode: Callable[[str], bytes]
) -> FileResult:
    findings = lint_source(source, name, config)
    result = FileResult(name, findings)
    if fix and any(fixable(f, config) for f in findings):
        new, left = fix_text(source, name, config)
        if new != source:
            try:
                result.new_bytes = encode(new)
            except SourceError as exc:
                message = f"{exc}; fixes not applied"
                result.findings.append(Finding(name, 1, 1, PARSE_ERROR, message))
                return result
            result.old_source, result.new_source = source, new
            result.fixed = max(len(findings) - len(left), 0)
            result.findings = left
    return result


def iter_python_files(paths: Iterable[Path], exclude: tuple[str, ...] = ()) -> Iterator[Path]:
    """``.py`` files under ``paths`` (files given directly are always included)."""
    for root in paths:
        try:
            mode = root.stat().st_mode
        except OSError as exc:  # missing, a dangling link, a link loop
            raise FileNotFoundError(
                f"cannot lint {root}: {(exc.strerror or str(exc)).lower()}"
            ) from None
        if not stat.S_ISDIR(mode):
            if not stat.S_ISREG(mode):  # a FIFO or a device given by name: never read
                raise NotAFileError(root, kind_of(mode))
            yield root
            continue
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root)
            if any(part in _SKIP_DIRS for part in rel.parts):
                continue
            if any(fnmatch.fnmatch(str(path), g) or fnmatch.fnmatch(str(rel), g) for g in exclude):
                continue
            yield path


def lint(
    paths: str | Path | Iterable[str | Path] = (),
    config: LintConfig | None = None,
    *,
    source: str | None = None,
    fix: bool = False,
    jobs: int = 1,
) -> LintReport:
    """Lint Python code for dtype leaks: the ``.py`` files under ``paths`` (a path or
    several), and/or one ``source`` text (reported as ``<string>``). With ``fix``, each
    result's fixed text is in ``new_source``; nothing is written. ``jobs``: see
    :func:`lint_paths`."""
    config = config or LintConfig()
    targets = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not targets and source is None:
        raise ValueError("lint needs paths or source=...; e.g. lint('src/') or lint(source=code)")
    report = lint_paths(targets, config, fix=fix, jobs=jobs) if targets else LintReport()
    if source is not None:
        report.files.append(_lint_text(source, "<string>", config, fix, str.encode))
    return report


def lint_paths(
    paths: Iterable[str | Path],
    config: LintConfig | None = None,
    *,
    fix: bool = False,
    jobs: int = 1,
) -> LintReport:
    """Lint every ``.py`` file under ``paths``. With ``fix``, each file's fixed bytes are in
    its result's ``new_bytes`` (the CLI writes them atomically).

    ``jobs``: how many processes lint the files (0: one per CPU). The report is the same
    with any number, in the same order. Worker processes are *spawned*, so a script that
    passes ``jobs`` must call it under ``if __name__ == "__main__":``.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs={jobs!r}: must be a whole number >= 0 (0: one per CPU)")
    config = config or LintConfig()
    files = list(iter_python_files([Path(p) for p in paths], config.exclude))
    workers = min(jobs or os.cpu_count() or 1, len(files))
    if workers <= 1:
        with _gc_paused():
            try:
                results = [lint_file(path, config, fix=fix) for path in files]
            finally:
                forget()  # the run's trees, freed at once: the collector resumes with none
        return LintReport(unique(results))
    import multiprocessing  # here: a one-process run does not pay for importing them
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: a caller's threads (torch's pools) make fork unsafe
    context = multiprocessing.get_context("spawn")
    task = functools.partial(lint_file, config=config, fix=fix)
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        # a few chunks a worker: few round trips, and a slow chunk does not leave others idle
        chunk = max(1, len(files) // (workers * 4))
        return LintReport(unique(list(pool.map(task, files, chunksize=chunk))))
