"""The lint's speed-ups give the answers of the code they replace (issue #41): a helper's
"makes a tensor" answer, kept for a run, is asked again in the next run; the names indexed by
a constant, found from each ``[``, are the ones the documented pattern finds; a long number
makes its line hot in ASCII and non-ASCII text alike."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from halfprec.leaks.lint import lint_paths
from halfprec.leaks.lint.engine import _hot_lines
from halfprec.leaks.lint.flow import _containers
from support.lint_models import package

_USER = """\
import torch
from torch import nn

from .grids import base_grid


class Warp(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.mix = nn.Linear(n, n)

    def forward(self, feats):
        return self.mix(feats * base_grid(feats.shape[-1], feats.device))
"""

_PLAIN = "def base_grid(n, device=None):\n    return n * 0.5\n"
_MAKES = """\
import torch


def base_grid(n, device=None):
    return torch.linspace(-1, 1, n, device=device)
"""


def _found(pkg: Path) -> list[tuple[str, int, str]]:
    report = lint_paths([pkg])
    return sorted((Path(f.path).name, f.line, f.code) for r in report.files for f in r.findings)


def test_a_helper_changed_between_two_runs_is_read_again(tmp_path: Path) -> None:
    pkg = package(tmp_path / "pkg", {"grids.py": _PLAIN, "warp.py": _USER})
    assert _found(pkg) == []
    (pkg / "grids.py").write_text(_MAKES)
    assert _found(pkg) == [("grids.py", 5, "HP101")]
    (pkg / "grids.py").write_text(_PLAIN)
    assert _found(pkg) == []


_DOCUMENTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*+)\[\s*-?\d+\s*\]")


@pytest.mark.parametrize(
    "text",
    [
        "out[0] + y[ -1 ]",
        "self.out[0]",
        "9x[0]",
        "\u00e9a[0] + a\u00e9[1] + \u00e9[2]",
        "a[0]b[1]",
        "x[[0]]",
        "[0] + _[2]",
        "a[0.5] + b[i] + c[ 3 ]",
        "d[1]\n[4]",
    ],
)
def test_the_indexed_names_are_the_documented_patterns(text: str) -> None:
    lines = text.split("\n")
    fn = types.SimpleNamespace(lineno=1, end_lineno=len(lines))
    expected = frozenset(m.group(1) for m in _DOCUMENTED.finditer(text))
    assert _containers(fn, lines) == expected  # type: ignore[arg-type]


def test_long_numbers_make_hot_lines_in_ascii_and_other_text() -> None:
    text = "a = 1\nb = 1e-6\nc = 12345\nd = 1234\n"
    assert _hot_lines(text, text.split("\n"), frozenset()) == {2, 3}
    other = text + "e = '\u0661\u0662\u0663\u0664\u0665'\n"  # Arabic-Indic digits: `\d`
    assert _hot_lines(other, other.split("\n"), frozenset()) == {2, 3, 5}
