"""Static lint for dtype leaks in ``forward`` code, with safe autofixes (``--fix``).

``import halfprec.lint`` needs only the standard library. ``--fix`` edits only the spans it
fixes: encoding, BOM, line endings and form feeds stay byte for byte.
"""

from __future__ import annotations

from halfprec.leaks.lint.config import LintConfig, LintConfigError, load_config
from halfprec.leaks.lint.engine import (
    fix_text,
    fixable,
    iter_python_files,
    lint,
    lint_file,
    lint_paths,
    lint_source,
)
from halfprec.leaks.lint.findings import FileResult, Finding, Fix, LintReport
from halfprec.leaks.lint.rules import RULES, Rule

__all__ = [
    "FileResult",
    "Finding",
    "Fix",
    "LintConfig",
    "LintConfigError",
    "LintReport",
    "RULES",
    "Rule",
    "fix_source",
    "fixable",
    "iter_python_files",
    "lint",
    "lint_file",
    "lint_paths",
    "lint_source",
    "load_config",
]


def fix_source(source: str, config: LintConfig | None = None) -> str:
    """``source`` with every fixable finding rewritten (unsafe ones only if configured)."""
    return fix_text(source, "<string>", config or LintConfig())[0]
