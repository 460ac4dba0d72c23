"""Static lint for dtype leaks in ``forward`` code, with safe autofixes (``--fix``).

``import halfprec.lint`` needs only the standard library; libcst is imported when fixing.
"""

from __future__ import annotations

from halfprec.leaks.lint.config import LintConfig, LintConfigError, load_config
from halfprec.leaks.lint.engine import (
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
    from halfprec.leaks.lint.fix import apply_fixes

    config = config or LintConfig()
    todo = [f.fix for f in lint_source(source, "<string>", config) if fixable(f, config)]
    return apply_fixes(source, [f for f in todo if f is not None]) if todo else source
