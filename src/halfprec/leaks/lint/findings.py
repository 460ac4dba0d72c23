"""What a lint run produces: findings, each with an optional fix, and per-file results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from halfprec.leaks.lint.rules import FIX_NONE, FIX_UNSAFE, RULES

__all__ = ["Fix", "Finding", "FileResult", "LintReport"]

# Fix actions, applied by ``fix.apply_fixes`` as edits of the source text:
METHOD = "method"  # replace the function of a Call (the span) with ``text`` (``x.new_zeros``)
KWARG = "kwarg"  # append ``name=text`` to the arguments of the Call at the span
EXPR = "expr"  # replace the expression at the span with ``text``


@dataclass(frozen=True)
class Fix:
    """One rewrite at ``start``..``end`` (1-based line, 0-based character column).

    ``after``: for KWARG, where the last argument ends (None: the call has none).
    ``unsafe``: this rewrite may change fp32 results even though its rule's fixes are safe
    in general (``x.new_zeros`` where the dtype of ``x`` is not known to be floating).
    """

    action: str
    start: tuple[int, int]
    end: tuple[int, int]
    text: str
    name: str = ""
    after: tuple[int, int] | None = None
    unsafe: bool = False

    def __post_init__(self) -> None:
        if self.action not in (METHOD, KWARG, EXPR):
            raise ValueError(f"fix action must be method, kwarg or expr, got {self.action!r}")
        if self.action == KWARG and not self.name:
            raise ValueError("a kwarg fix needs the keyword name")


@dataclass(frozen=True)
class Finding:
    """One rule violation at ``path:line:col`` (both 1-based, as ruff prints them)."""

    path: str
    line: int
    col: int
    code: str
    message: str
    fix: Fix | None = None

    @property
    def fix_safety(self) -> str:
        """``safe``, ``unsafe`` or ``none``: the rule's fix safety, made ``unsafe`` by a fix
        whose own rewrite may change fp32 results."""
        if self.fix is None or self.code not in RULES or RULES[self.code].fix == FIX_NONE:
            return FIX_NONE
        return FIX_UNSAFE if self.fix.unsafe else RULES[self.code].fix

    def render(self, fixable: bool | None = None) -> str:
        """``path:line:col: CODE [*] message``; ``[*]`` marks what ``--fix`` would rewrite
        (``fixable``, default: any finding with a fix)."""
        mark = " [*]" if (self.fix is not None if fixable is None else fixable) else ""
        return f"{self.path}:{self.line}:{self.col}: {self.code}{mark} {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "code": self.code,
            "message": self.message,
            "fix": self.fix_safety if self.fix is not None else None,
        }


@dataclass
class FileResult:
    """Findings of one file; after ``--fix``, the ones left and how many were fixed.

    ``new_bytes`` is the fixed file, byte for byte the original outside the fixed spans
    (same encoding, BOM, line endings); ``old_source``/``new_source`` are its text.
    """

    path: str
    findings: list[Finding] = field(default_factory=list)
    fixed: int = 0
    new_source: str | None = None
    old_source: str | None = None
    new_bytes: bytes | None = None


@dataclass
class LintReport:
    """Findings of a whole run."""

    files: list[FileResult] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.files for f in r.findings]

    @property
    def fixed(self) -> int:
        return sum(r.fixed for r in self.files)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.findings:
            out[f.code] = out.get(f.code, 0) + 1
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "files": len(self.files),
            "findings": [f.to_json() for f in self.findings],
            "counts": self.counts(),
            "fixed": self.fixed,
        }
