"""Per-line suppression comments.

``# halfprec: ignore[HP101]`` (or ``ignore[HP101,HP301]``, or a prefix such as ``HP3``)
suppresses those rules on its line; a bare ``# halfprec: ignore`` suppresses every rule there.
"""

from __future__ import annotations

import re

from halfprec.leaks.lint.source import split_lines

__all__ = ["suppressions", "is_suppressed"]

_COMMENT = re.compile(r"#\s*halfprec:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")
ALL = frozenset({""})  # the empty prefix matches every code


def suppressions(source: str) -> dict[int, frozenset[str]]:
    """Line number (1-based) -> the code prefixes suppressed on that line."""
    out: dict[int, frozenset[str]] = {}
    if "halfprec:" not in source:
        return out
    for number, line in enumerate(split_lines(source), start=1):
        if "halfprec:" not in line:
            continue
        codes: set[str] = set()
        for match in _COMMENT.finditer(line):
            listed = match.group(1)
            if listed is None:
                codes |= ALL
            else:
                codes |= {c.strip().upper() for c in listed.split(",") if c.strip()}
        if codes:
            out[number] = frozenset(codes)
    return out


def is_suppressed(table: dict[int, frozenset[str]], line: int, code: str) -> bool:
    return any(code.startswith(prefix) for prefix in table.get(line, ()))
