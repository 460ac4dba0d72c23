"""Lint configuration: ``[tool.halfprec.lint]`` in pyproject.toml, overridden by the CLI.

.. code-block:: toml

    [tool.halfprec.lint]
    select = ["HP"]          # codes or prefixes
    ignore = ["HP202"]
    exclude = ["tests/*"]    # fnmatch globs on paths
    unsafe-fixes = false
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halfprec.errors import HalfprecError
from halfprec.leaks.lint.rules import RULES, codes_matching

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["LintConfig", "LintConfigError", "load_config", "find_pyproject"]

_KEYS = {"select", "ignore", "exclude", "unsafe-fixes"}
# HP2 (explicit upcasts) runs only when selected: an upcast that is cast back before it
# meets half is the right pattern, and one that escapes is reported with --select HP2
DEFAULT_SELECT = ("HP1", "HP3")


class LintConfigError(HalfprecError, ValueError):
    """A rule code, option or pyproject section that halfprec lint does not know."""


@dataclass(frozen=True)
class LintConfig:
    """Which rules run, which paths are skipped, and whether unsafe fixes apply."""

    select: tuple[str, ...] = DEFAULT_SELECT
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    unsafe_fixes: bool = False

    def __post_init__(self) -> None:
        for name in ("select", "ignore", "exclude", "unsafe_fixes"):
            problem = type_problem(name, getattr(self, name))
            if problem:
                raise LintConfigError(f"LintConfig({name}={getattr(self, name)!r}): {problem}")
        for name in ("select", "ignore", "exclude"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            object.__setattr__(self, name, tuple(value))
        for code in (*self.select, *self.ignore):
            if not codes_matching(code):
                raise LintConfigError(
                    f"unknown rule code {code!r}; use one of {', '.join(RULES)} or a prefix "
                    "such as HP1"
                )

    @property
    def enabled(self) -> frozenset[str]:
        """The rule codes that run: selected and not ignored."""
        chosen = {c for p in self.select for c in codes_matching(p)}
        dropped = {c for p in self.ignore for c in codes_matching(p)}
        return frozenset(chosen - dropped)


def type_problem(name: str, value: object) -> str | None:
    """Why ``value`` cannot be the option ``name`` (``unsafe_fixes``, ``select``, ...), or None."""
    if name == "unsafe_fixes":
        if isinstance(value, bool):
            return None
        return "must be true or false (a TOML boolean, not a string or number)"
    if isinstance(value, str):
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return None
    return 'must be a list of strings, e.g. ["HP1", "HP202"]'


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start``."""
    here = start.resolve()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(start: Path, **overrides: Any) -> LintConfig:
    """Read ``[tool.halfprec.lint]`` from the pyproject.toml above ``start``; apply overrides.

    Overrides that are ``None`` are ignored, so CLI options left unset keep the file's values.
    """
    values: dict[str, Any] = {}
    pyproject = find_pyproject(start)
    if pyproject is not None:
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise LintConfigError(f"{pyproject} is not valid TOML ({exc}); fix the file") from None
        section = data.get("tool", {}).get("halfprec", {}).get("lint", {})
        if not isinstance(section, dict):
            raise LintConfigError(f"{pyproject}: [tool.halfprec.lint] must be a table")
        unknown = set(section) - _KEYS
        if unknown:
            raise LintConfigError(
                f"{pyproject}: unknown key(s) {', '.join(sorted(unknown))} in "
                f"[tool.halfprec.lint]; allowed: {', '.join(sorted(_KEYS))}"
            )
        for key, value in section.items():
            problem = type_problem(key.replace("-", "_"), value)
            if problem:
                raise LintConfigError(
                    f"{pyproject}: {key} = {value!r} in [tool.halfprec.lint]: {problem}"
                )
        values = {k.replace("-", "_"): v for k, v in section.items()}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return LintConfig(**values)
