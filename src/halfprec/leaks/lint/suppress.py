"""Per-line suppression comments.

``# halfprec: ignore[HP101]`` (or ``ignore[HP101,HP301]``, or a prefix such as ``HP3``)
suppresses those rules on its line; a bare ``# halfprec: ignore`` suppresses every rule there.
``# noqa: HP101`` (codes among other tools' codes: ``# noqa: E501, HP101``) is honoured too,
and a bare ``# noqa`` suppresses every rule on its line, as ruff and flake8 read it.
"""

from __future__ import annotations

import re

from halfprec.leaks.lint.source import split_lines

__all__ = ["suppressions", "is_suppressed"]

_COMMENT = re.compile(r"#\s*halfprec:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")
# ruff's form: the bare word, or the word, a colon and codes separated by commas or spaces
_NOQA = re.compile(r"#\s*noqa(?::\s*([A-Za-z]+[0-9]+(?:[,\s]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
ALL = frozenset({""})  # the empty prefix matches every code


def suppressions(source: str) -> dict[int, frozenset[str]]:
    """Line number (1-based) -> the code prefixes suppressed on that line."""
    out: dict[int, frozenset[str]] = {}
    if "halfprec:" not in source and "noqa" not in source.lower():
        return out
    for number, line in enumerate(split_lines(source), start=1):
        if "halfprec:" not in line and "noqa" not in line.lower():
            continue
        codes: set[str] = set()
        for match in _COMMENT.finditer(line):
            listed = match.group(1)
            if listed is None:
                codes |= ALL
            else:
                codes |= {c.strip().upper() for c in listed.split(",") if c.strip()}
        for match in _NOQA.finditer(line):
            listed = match.group(1)
            if listed is None:
                codes |= ALL
            else:  # other tools' codes are kept too: they match no HP code
                codes |= {c.upper() for c in re.split(r"[,\s]+", listed) if c}
        if codes:
            out[number] = frozenset(codes)
    return out


def is_suppressed(table: dict[int, frozenset[str]], line: int, code: str) -> bool:
    return any(code.startswith(prefix) for prefix in table.get(line, ()))
