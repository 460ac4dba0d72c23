"""``lint_paths`` lints many files in worker processes by default, and gives the report of
one process: every file, finding and fix in the same order, including what one file learns
from another (a helper it imports, names a package re-exports with ``import *``, a base
class in another file). The lint runs in a fresh interpreter, as ``halfprec lint`` does:
without torch, so its workers are forked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support import ROOT
from support.lint_models import package

_NOISE = """\
import torch


def make_noise(h, w, device=None):
    return torch.rand(h, w, device=device) * 2 - 1
"""

_BASE = """\
import torch
from torch import nn


class Scaled(nn.Module):
    def forward(self, x):
        return x * torch.ones(x.shape[-1], device=x.device)
"""

_MODELS = (
    """\
import torch
from torch import nn

from .noise import make_noise


class Blend{i}(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, img):
        return self.proj(img + make_noise(img.shape[0], img.shape[1], img.device))
""",
    """\
import torch

from .base import Scaled


class Shifted{i}(Scaled):
    def forward(self, x):
        return super().forward(x) + torch.zeros(x.shape, device=x.device)
""",
    """\
import torch
from torch import nn


class Clean{i}(nn.Module):
    def forward(self, x):
        return x + x.new_zeros(x.shape)
""",
)

# lints the package given first with the default jobs and then with each count given after;
# prints whether a default run started a pool, and each run's report
_SCRIPT = """
import json, sys
from halfprec.leaks.lint import LintConfig, lint_paths
def report(jobs):
    kwargs = {} if jobs == "default" else {"jobs": int(jobs)}
    result = lint_paths([sys.argv[1]], LintConfig(select=("HP",)), fix=True, **kwargs)
    return [repr(file) for file in result.files]
reports = {"default": report("default")}
pooled = "concurrent.futures.process" in sys.modules
reports.update({jobs: report(jobs) for jobs in sys.argv[2:]})
print(json.dumps({"pooled": pooled, "torch": "torch" in sys.modules, "reports": reports}))
"""


def _package(root: Path, files: int) -> Path:
    texts = {"__init__.py": "", "noise.py": _NOISE, "base.py": _BASE}
    for i in range(files - len(texts)):
        texts[f"model_{i}.py"] = _MODELS[i % len(_MODELS)].format(i=i)
    return package(root / "pkg", texts)


def _lint(pkg: Path, *jobs: str) -> dict[str, Any]:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(pkg), *jobs],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.slow  # a subprocess, with worker processes
def test_many_files_are_linted_in_workers_with_the_report_of_one_process(tmp_path: Path) -> None:
    from halfprec.leaks.lint.engine import MIN_PARALLEL_FILES

    pkg = _package(tmp_path, MIN_PARALLEL_FILES)
    result = _lint(pkg, "1", "2", "3")
    assert result["pooled"] and not result["torch"]
    reports = result["reports"]
    one = reports["1"]
    assert len(one) == MIN_PARALLEL_FILES
    # the helper's noise is reported in its own file, once; each subclass's zeros is fixed
    assert sum("noise.py', line=5" in r for r in one) == 1
    assert sum("fixed=1" in r for r in one) > MIN_PARALLEL_FILES // 4
    assert reports["default"] == one and reports["2"] == one and reports["3"] == one


@pytest.mark.slow  # a subprocess
def test_a_few_files_are_linted_in_this_process(tmp_path: Path) -> None:
    from halfprec.leaks.lint.engine import MIN_PARALLEL_FILES

    pkg = _package(tmp_path, MIN_PARALLEL_FILES - 1)
    result = _lint(pkg, "1")
    assert not result["pooled"]
    assert result["reports"]["default"] == result["reports"]["1"]
