"""Lint configuration: ``[tool.halfprec.lint]`` in pyproject.toml, overridden by the CLI.

.. code-block:: toml

    [tool.halfprec.lint]
    select = ["HP"]          # codes or prefixes
    ignore = ["HP202"]
    exclude = ["tests/*"]    # fnmatch globs on paths
    unsafe-fixes = false

    [tool.halfprec.lint.per-file-ignores]
    "tests/*" = ["HP101"]     # a glob -> codes or prefixes not reported in matching files
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from halfprec.errors import HalfprecError
from halfprec.leaks.lint.rules import RULES, codes_matching

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["LintConfig", "LintConfigError", "load_config", "find_pyproject"]

_KEYS = {"select", "ignore", "exclude", "unsafe-fixes", "per-file-ignores"}
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
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        for name in ("select", "ignore", "exclude", "unsafe_fixes", "per_file_ignores"):
            problem = type_problem(name, getattr(self, name))
            if problem:
                raise LintConfigError(f"LintConfig({name}={getattr(self, name)!r}): {problem}")
        for name in ("select", "ignore", "exclude"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            object.__setattr__(self, name, tuple(value))
        pairs = self.per_file_ignores
        items = pairs.items() if isinstance(pairs, dict) else pairs
        pairs = tuple(
            (glob, (codes,) if isinstance(codes, str) else tuple(codes)) for glob, codes in items
        )
        object.__setattr__(self, "per_file_ignores", pairs)
        for code in (*self.select, *self.ignore, *(c for _, cs in pairs for c in cs)):
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

    def enabled_for(self, path: str) -> frozenset[str]:
        """The rule codes that run on ``path``: :attr:`enabled` less its per-file ignores.
        A glob matches the path as given or any tail of it (``tests/*`` matches
        ``/repo/tests/test_a.py``), so it works from any folder lint runs in."""
        enabled = self.enabled
        if not self.per_file_ignores:
            return enabled
        parts = PurePath(path).parts
        tails = [path, *("/".join(parts[i:]) for i in range(len(parts)))]
        dropped = {
            c
            for glob, prefixes in self.per_file_ignores
            if any(fnmatch.fnmatch(t, glob) for t in tails)
            for p in prefixes
            for c in codes_matching(p)
        }
        return enabled - dropped


def type_problem(name: str, value: object) -> str | None:
    """Why ``value`` cannot be the option ``name`` (``unsafe_fixes``, ``select``, ...), or None."""
    if name == "unsafe_fixes":
        if isinstance(value, bool):
            return None
        return "must be true or false (a TOML boolean, not a string or number)"
    if name == "per_file_ignores":
        items: list[object] = []
        if isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, (tuple, list)):
            items = list(value)
        if isinstance(value, (dict, tuple, list)) and all(
            isinstance(pair, tuple)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and type_problem("select", pair[1]) is None
            for pair in items
        ):
            return None
        return 'must be a table of globs to lists of codes, e.g. {"tests/*" = ["HP101"]}'
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


def _lint_section(pyproject: Path) -> dict[str, Any]:
    """``[tool.halfprec.lint]`` of ``pyproject`` (a regular file, UTF-8 TOML), ``{}`` when
    absent; each level must be a table."""
    from halfprec.readfile import read_regular

    try:
        data: Any = tomllib.loads(read_regular(pyproject, limit=16 * 2**20).decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LintConfigError(
            f"{pyproject} is not readable UTF-8 TOML ({exc}); fix the file"
        ) from None
    for depth, key in enumerate(("tool", "halfprec", "lint")):
        data = data.get(key, {})
        if not isinstance(data, dict):
            table = ".".join(("tool", "halfprec", "lint")[: depth + 1])
            raise LintConfigError(f"{pyproject}: {table} must be a table, not {data!r:.40}")
    return data


def load_config(start: Path, **overrides: Any) -> LintConfig:
    """Read ``[tool.halfprec.lint]`` from the pyproject.toml above ``start``; apply overrides.

    Overrides that are ``None`` are ignored, so CLI options left unset keep the file's values.
    """
    values: dict[str, Any] = {}
    pyproject = find_pyproject(start)
    if pyproject is not None:
        section = _lint_section(pyproject)
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
