"""Round nineteen's recall rules (issue #41), each with small models of our own: the
misses of blind freezes M and N, fixed for their class.

Names a package hands on with ``from .module import *`` (``.starred``): a tensor passed to a
helper, or a module class, that the ``__init__.py`` of a package star-imports is followed
into it as into one the ``__init__.py`` names. Values a dict attribute holds (``.heldvalues``):
``self.centres[k] = t`` is followed through ``self.centres.items()`` and ``.values()``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.lint_models import Snippets, package

from halfprec.leaks.lint import lint_paths

LINT = Snippets()

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


# Values a dict attribute holds, read back whole (.heldvalues): prototypes kept per class in
# ``self.centres[k]`` by a helper that forward calls, then read through ``.items()``.
_CENTRES = """
class Centres(nn.Module):
    def __init__(self):
        super().__init__()
        self.centres = {}
        self.proj = nn.Linear(8, 8)

    def forward(self, x, classes):
        self.ensure(classes, x.shape[-1], x.device)
        feats = self.proj(x)
        dists = []
        for k, centre in self.centres.READ:
            dists.append((feats - USE).pow(2).sum(-1))
        return torch.stack(dists, -1)

    def ensure(self, classes, d, device):
        for k in classes:
            if k not in self.centres:
                self.centres[k] = torch.zeros(d).to(device)
"""


def _centres(read: str, use: str = "centre") -> str:
    return _CENTRES.replace("READ", read).replace("USE", use)


def test_class_centres_kept_in_a_dict_attribute_and_read_through_items_leak() -> None:
    assert LINT.lines(_centres("items()")) == [19]


def test_class_centres_read_through_values_leak() -> None:
    body = _centres("items()").replace(
        "for k, centre in self.centres.items()", "for centre in self.centres.values()"
    )
    assert LINT.lines(body) == [19]


def test_class_centres_cast_where_read_stay_silent() -> None:
    assert LINT.lines(_centres("items()", "centre.to(feats.dtype)")) == []


def test_class_centres_only_counted_stay_silent() -> None:
    body = _centres("items()").replace(
        "for k, centre in self.centres.items():\n            dists.append((feats - centre)",
        "for k in self.centres.keys():\n            dists.append((feats - feats[..., :1])",
    )
    assert LINT.lines(body) == []
