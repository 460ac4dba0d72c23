"""Apply fixes as edits of the source text: each fix replaces (or inserts into) only the
span it names, so every other character -- line endings, form feeds, comments, layout --
stays as it was. Findings come from ``ast``; a :class:`~.findings.Fix` holds the span in
characters on lines split as Python splits them (:func:`.source.split_lines`).
"""

from __future__ import annotations

from collections.abc import Callable

from halfprec.leaks.lint.findings import EXPR, KWARG, METHOD, Fix
from halfprec.leaks.lint.source import split_lines

__all__ = ["apply_fixes"]

Edit = tuple[int, int, str]  # replace text[start:end] with the string
Offset = Callable[[tuple[int, int]], int]  # (line, column) -> index into the text


def apply_fixes(source: str, fixes: list[Fix]) -> str:
    """``source`` with ``fixes`` applied. An edit that overlaps an earlier one, or whose
    span does not hold what the fix expects, is left out."""
    lines = split_lines(source, keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: tuple[int, int]) -> int:
        line, col = pos
        return starts[min(line, len(lines) + 1) - 1] + col

    edits: list[Edit] = []
    for fix in fixes:
        edit = _edit(source, fix, offset, lines)
        if edit is not None:
            edits.append(edit)
    out: list[str] = []
    done = 0
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1])):
        if start < done:  # overlaps the previous edit
            continue
        out.extend((source[done:start], text))
        done = end
    out.append(source[done:])
    return "".join(out)


def _edit(source: str, fix: Fix, offset: Offset, lines: list[str]) -> Edit | None:
    start, end = offset(fix.start), offset(fix.end)
    if fix.action in (EXPR, METHOD):
        return (start, end, fix.text)
    if fix.action != KWARG or source[end - 1 : end] != ")":
        return None
    close = end - 1
    new = f"{fix.name}={fix.text}"
    if fix.after is None:
        return (close, close, new)
    last, comma = _last_argument_end(source, offset(fix.after), close)
    if comma is None:
        return (last, last, f", {new}")
    if "\n" not in source[comma:close] and "\r" not in source[comma:close]:
        return (comma + 1, comma + 1, f" {new},")
    # one argument per line with a trailing comma: the new one gets its own line, indented
    # like the last argument, ending like the line before the closing parenthesis
    last_line = lines[fix.after[0] - 1]
    indent = last_line[: len(last_line) - len(last_line.lstrip(" \t"))]
    bol = max(source.rfind("\n", 0, close), source.rfind("\r", 0, close)) + 1
    newline = "\r\n" if source[:bol].endswith("\r\n") else source[bol - 1 : bol]
    return (bol, bol, f"{indent}{new},{newline}")


def _last_argument_end(source: str, after: int, close: int) -> tuple[int, int | None]:
    """Where the last argument really ends (past parentheses around it) and the offset of
    its trailing comma, if any. Between ``after`` and ``close`` there are only closing
    parentheses, a comma, whitespace, comments and line continuations."""
    i, last = after, after
    while i < close:
        ch = source[i]
        if ch == "#":
            ends = [j for j in (source.find("\n", i, close), source.find("\r", i, close)) if j >= 0]
            i = min(ends) if ends else close
            continue
        if ch == ")":
            last = i + 1
        elif ch == ",":
            return last, i
        i += 1
    return last, None
