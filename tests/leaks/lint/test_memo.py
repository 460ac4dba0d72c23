"""A lint run keeps other files' trees while it runs (a class imported from another file
is followed into it) and drops them when it ends: the process is left with none of the
linted trees, so the garbage collector, paused for the run, resumes with nothing of it to
walk. The findings are those of two runs apart."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

from halfprec.leaks.lint import lint_paths
from support.lint_models import package

_BLOCK = """\
import torch
from torch import nn


class UniqueMemoBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return self.proj(x) + torch.ones(x.shape[-1])
"""

_MODEL = """\
import torch
from torch import nn

from .block import UniqueMemoBlock


class UniqueMemoModel(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.block = UniqueMemoBlock(d)

    def forward(self, x):
        scale = torch.ones(x.shape[-1])  # followed into the block's forward, in block.py
        return self.block(scale) + x
"""


def _package(tmp_path: Path) -> Path:
    return package(tmp_path / "pkg", {"block.py": _BLOCK, "model.py": _MODEL})


def _linted_classes() -> list[str]:
    """The class definitions of this test's files still alive in the process. By exact
    type: ``isinstance`` asks a dead ``weakref.proxy`` among the objects for its class,
    which raises ``ReferenceError`` (another test in the same worker may leave one)."""
    return [
        o.name
        for o in gc.get_objects()
        if type(o) is ast.ClassDef and o.name.startswith("UniqueMemo")
    ]


def test_a_run_leaves_no_trees_and_the_same_findings(tmp_path: Path) -> None:
    root = _package(tmp_path)
    first = lint_paths([root])
    assert _linted_classes() == []
    second = lint_paths([root])
    assert _linted_classes() == []
    found = [(f.path, f.line, f.code, f.message) for f in first.findings]
    assert found == [(f.path, f.line, f.code, f.message) for f in second.findings]
    assert [(Path(p).name, line, code) for p, line, code, _ in found] == [
        ("block.py", 11, "HP101"),
        ("model.py", 13, "HP101"),
    ]


def test_the_collector_runs_again_after_a_run(tmp_path: Path) -> None:
    assert gc.isenabled()
    lint_paths([_package(tmp_path)])
    assert gc.isenabled()
