"""The lint walks a forward-path function only when one of its nodes has a shape an enabled
check needs (:mod:`halfprec.leaks.lint.triggers`), and runs only the checks whose codes are
enabled. Each trigger must admit every node its check reports on: checked here by walking,
with every check, each forward-path function of every source in the lint's own tests that
no trigger admits, and finding nothing there."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from halfprec.leaks.lint import LintConfig, lint_source
from halfprec.leaks.lint.casts import check_casts
from halfprec.leaks.lint.constants import check_constants
from halfprec.leaks.lint.engine import checks_for
from halfprec.leaks.lint.factories import check_factory
from halfprec.leaks.lint.flow import calls_of, walk_function
from halfprec.leaks.lint.scope import forward_paths, imports_of, program_of
from halfprec.leaks.lint.source import split_lines
from halfprec.leaks.lint.triggers import fill_or_constant, torch_factory, triggered, upcast

_TORCH = frozenset({"torch"})
_ALL = [torch_factory, upcast, fill_or_constant]


def _node(expr: str) -> ast.AST:
    return ast.parse(expr, mode="eval").body


@pytest.mark.parametrize(
    ("trigger", "expr", "admitted"),
    [
        (torch_factory, "torch.zeros(3)", True),
        (torch_factory, "torch.arange(n)", True),
        (torch_factory, "np.zeros(3)", False),
        (torch_factory, "torch.sigmoid(x)", False),
        (fill_or_constant, "scores * -1e9", True),
        (fill_or_constant, "(1 - mask) * -10000000", True),
        (fill_or_constant, "x * 2.0", False),
        (fill_or_constant, "x - 65504", False),
        (fill_or_constant, "x / 1e9", False),
        (fill_or_constant, "s.masked_fill(m, -1e9)", True),
        (fill_or_constant, "s.masked_fill(m, value=float('-inf'))", False),
        (fill_or_constant, "torch.finfo(torch.float32).min", False),  # the Attribute
        (fill_or_constant, "torch.finfo(torch.float32)", True),
        (upcast, "x.float()", True),
        (upcast, "x.to(torch.float32)", True),
        (upcast, "torch.ones(3, dtype=torch.float)", True),
        (upcast, "torch.get_default_dtype()", True),
        (upcast, "x.half()", False),
    ],
)
def test_a_trigger_admits_the_shapes_its_check_needs(trigger, expr, admitted) -> None:
    assert trigger(_node(expr), _TORCH) is admitted


def test_checks_run_only_for_enabled_codes() -> None:
    assert checks_for(frozenset({"HP101", "HP301"})) == [check_factory, check_constants]
    assert checks_for(frozenset({"HP201"})) == [check_casts]
    assert checks_for(frozenset()) == []


_HEADER = "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n"


def _sources() -> list[str]:
    """Every string in the lint's tests that defines a ``forward`` and parses (dedented,
    after torch's imports where it has none of its own)."""
    found: list[str] = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = node.value if isinstance(node, ast.Constant) else None
            if not isinstance(text, str) or "def forward" not in text:
                continue
            text = textwrap.dedent(text)
            if "import torch" not in text:
                text = _HEADER + text
            try:
                ast.parse(text)
            except SyntaxError:
                continue
            found.append(text)
    return found


def _quiet_untriggered(source: str) -> tuple[int, int]:
    """Walk every forward-path function of ``source`` that no trigger admits with every
    check; returns how many were walked and how many of those reported something."""
    tree = ast.parse(source)
    imports, lines = imports_of(tree), split_lines(source)
    program = program_of(tree)
    calls = calls_of(program, imports, lines)
    walked = reported = 0
    for fpath in forward_paths(tree, lines, program):
        if triggered(fpath.function, _ALL, imports.torch):
            continue
        ctx = walk_function(
            fpath.function,
            imports,
            lines,
            [check_factory, check_casts, check_constants],
            facts=fpath.facts,
            is_forward=fpath.is_forward,
            calls=calls,
        )
        walked += 1
        reported += bool(ctx.found or ctx.pending or ctx.deferred)
    calls.close()
    return walked, reported


def test_no_check_reports_in_a_function_no_trigger_admits() -> None:
    sources = _sources()
    assert len(sources) > 100  # the lint's tests hold many forward paths
    walked = reported = 0
    for source in sources:
        w, r = _quiet_untriggered(source)
        walked, reported = walked + w, reported + r
    assert walked > 50  # untriggered functions were met and walked
    assert reported == 0


def test_a_function_without_a_trigger_is_still_followed_into() -> None:
    """A helper with no trigger of its own is not walked as a forward path, but a tensor
    made in forward is still followed through it."""
    source = (
        "import torch\nfrom torch import nn\n\n\n"
        "def shift(t, h):\n    return h + t\n\n\n"
        "class Block(nn.Module):\n"
        "    def __init__(self, d):\n        super().__init__()\n"
        "        self.proj = nn.Linear(d, d)\n\n"
        "    def forward(self, x):\n"
        "        h = self.proj(x)\n"
        "        return shift(torch.ones(h.shape[-1]), h)\n"
    )
    found = lint_source(source, "block.py", LintConfig())
    assert [(f.line, f.code) for f in found] == [(16, "HP101")]
