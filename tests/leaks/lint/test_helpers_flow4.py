"""Round nineteen's recall rules (issue #41), each with small models of our own: the
misses of blind freezes M and N, fixed for their class.

Names a package hands on with ``from .module import *`` (``.starred``): a tensor passed to a
helper, or a module class, that the ``__init__.py`` of a package star-imports is followed
into it as into one the ``__init__.py`` names.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.lint_models import package

from halfprec.leaks.lint import lint_paths

_OPS = """\
import torch


def keep_of(labels):
    return labels >= 0


def reduce(values, how):
    if how == "sum":
        return values.sum()
    return values.mean()
"""

_LOSS = """\
import torch
from torch import nn

from {ops} import keep_of, reduce


class MarginLoss(nn.Module):
    def __init__(self, how="mean"):
        super().__init__()
        self.how = how

    def forward(self, scores, labels):
        per_item = torch.zeros(scores.shape[0], device=scores.device)
        keep = keep_of(labels)
        per_item[keep] = (1.0 - scores[keep]).clamp(min=0).amax(dim=1)
        return reduce(per_item, self.how)
"""


def _found(pkg: Path) -> list[tuple[str, int, str]]:
    return sorted((Path(f.path).name, f.line, f.code) for f in lint_paths([pkg]).findings)


def _ops_package(tmp_path: Path, init: str, ops: str = _OPS) -> Path:
    files = {"ops/core.py": ops, "ops/__init__.py": init, "losses/margin.py": _LOSS}
    return package(tmp_path / "pkg", {k: v.format(ops="..ops") for k, v in files.items()})


@pytest.mark.parametrize(
    "init", ["from .core import *\n", "from .other import *\nfrom .core import *\n"]
)
def test_a_buffer_handed_to_a_helper_a_package_star_imports_leaks(
    tmp_path: Path, init: str
) -> None:
    pkg = _ops_package(tmp_path, init)
    if "other" in init:
        (pkg / "ops" / "other.py").write_text("def unrelated(x):\n    return x\n")
    assert _found(pkg) == [("margin.py", 13, "HP101")]


def test_a_helper_the_package_names_was_already_followed(tmp_path: Path) -> None:
    pkg = _ops_package(tmp_path, "from .core import keep_of, reduce\n")
    assert _found(pkg) == [("margin.py", 13, "HP101")]


def test_a_star_imported_helper_that_casts_back_stays_silent(tmp_path: Path) -> None:
    cast = _OPS.replace("    return values.mean()", "    return values.mean().to(torch.float16)")
    cast = cast.replace("return values.sum()", "return values.sum().half()")
    pkg = _ops_package(tmp_path, "from .core import *\n", cast)
    assert _found(pkg) == []


def test_a_star_import_of_a_module_without_the_helper_stays_silent(tmp_path: Path) -> None:
    pkg = _ops_package(tmp_path, "from .core import keep_of\nfrom .other import *\n")
    (pkg / "ops" / "other.py").write_text("def unrelated(x):\n    return x\n")
    assert _found(pkg) == []  # reduce is nowhere: unknown, not reported


_BLOCKS = """\
import torch
from torch import nn


class Mix(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x, bias):
        return self.proj(x) + bias
"""

_NET = """\
import torch
from torch import nn

from .layers import Mix


class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mix = Mix(d)

    def forward(self, x):
        bias = torch.ones(x.shape[-1], device=x.device)
        return self.mix(x, bias)
"""


def test_a_tensor_into_a_module_class_a_package_star_imports_leaks(tmp_path: Path) -> None:
    files = {"layers/mix.py": _BLOCKS, "layers/__init__.py": "from .mix import *\n", "net.py": _NET}
    pkg = package(tmp_path / "pkg", files)
    assert _found(pkg) == [("net.py", 13, "HP101")]
