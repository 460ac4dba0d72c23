"""Values whose fate is decided in another file or folder of the same package: a function
imported from another folder (relative ``from ..ops.stats import update`` or absolute
``from pkg.ops.stats import update``) is followed there as one of the same file, with a
budget of names of its own; a tensor that such a function returns unchanged from a branch
chosen by the tensor's own rank (``if mask.dim() == 4: return mask``) is not reported for
that path alone, since the other ranks take the cast; ``self.blend(x, t)`` runs the method
a base class of another file defines. Each package here is small and written for this
test."""

from __future__ import annotations

from pathlib import Path

import pytest

from halfprec.leaks.lint import lint_paths
from support.lint_models import package

_STATS = """\
import torch


def update(count, mean, x):
    n = x.shape[-1]
    new_count = count + n
    new_mean = mean + (x.sum(-1) - mean * n) / new_count
    return new_count, new_mean
"""

_FORECASTER = """\
import torch
from torch import nn

{import_line}


class Forecaster(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.head = nn.Linear(d, d)

    def forward(self, x):
        count = torch.zeros(x.shape[0], device=x.device)
        mean = torch.zeros(x.shape[0], device=x.device)
        count, mean = update(count, mean, x)
        return self.head(x - mean[:, None])
"""


def _package(tmp_path: Path, import_line: str, stats: str = _STATS) -> Path:
    model = _FORECASTER.format(import_line=import_line)
    files = {"ops/stats.py": stats, "models/forecasting/forecaster.py": model}
    return package(tmp_path / "pkg", files)


@pytest.mark.parametrize(
    "import_line", ["from ...ops.stats import update", "from pkg.ops.stats import update"]
)
def test_running_statistics_updated_by_a_helper_of_another_folder_leak(
    tmp_path: Path, import_line: str
) -> None:
    pkg = _package(tmp_path, import_line)
    found = sorted((Path(f.path).name, f.line, f.code) for f in lint_paths([pkg]).findings)
    assert found == [("forecaster.py", 13, "HP101"), ("forecaster.py", 14, "HP101")]


def test_running_statistics_cast_by_the_helper_of_another_folder_stay_silent(
    tmp_path: Path,
) -> None:
    cast = _STATS.replace(
        "    n = x.shape[-1]\n", "    n = x.shape[-1]\n    mean = mean.to(x.dtype)\n"
    )
    cast = cast.replace("count + n", "(count + n).to(x.dtype)")
    pkg = _package(tmp_path, "from ...ops.stats import update", cast)
    assert lint_paths([pkg]).findings == []


_MASKS = """\
import torch


def bidirectional_mask(mask, embeds):
    if mask.dim() == 4:
        return mask
    mask = mask.to(dtype=torch.bool)
    zero = torch.zeros((), dtype=embeds.dtype, device=embeds.device)
    low = torch.full((), -1e4, dtype=embeds.dtype, device=embeds.device)
    return torch.where(mask[:, None, None, :], zero, low)
"""

_ENCODER = """\
import torch
from torch import nn

from {masks} import bidirectional_mask


class Encoder(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.qk = nn.Linear(d, d)

    def forward(self, x, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones(x.shape[:2], device=x.device)
        bias = bidirectional_mask(attention_mask, x)
        scores = self.qk(x) @ x.transpose(-1, -2)
        return (scores[:, None] + bias).softmax(-1)
"""


@pytest.mark.parametrize("where", ["same", "other"])
def test_a_default_mask_a_builder_returns_as_is_only_for_4d_stays_silent(
    tmp_path: Path, where: str
) -> None:
    name, masks = ("models/masks.py", ".masks") if where == "same" else ("masking.py", "..masking")
    files = {name: _MASKS, "models/encoder.py": _ENCODER.format(masks=masks)}
    pkg = package(tmp_path / "pkg", files)
    assert lint_paths([pkg]).findings == []


def test_a_default_mask_a_builder_returns_as_is_for_every_rank_leaks(tmp_path: Path) -> None:
    passthrough = _MASKS.replace("    mask = mask.to(dtype=torch.bool)\n", "    return mask\n")
    files = {"masking.py": passthrough, "models/encoder.py": _ENCODER.format(masks="..masking")}
    pkg = package(tmp_path / "pkg", files)
    found = [(Path(f.path).name, f.line) for f in lint_paths([pkg]).findings]
    assert found == [("encoder.py", 14)]


def test_a_rank_normalised_value_goes_on_after_the_branch(tmp_path: Path) -> None:
    points = """\
import torch


def sample_points(features, coords):
    if coords.dim() == 3:
        coords = coords.unsqueeze(2)
    return torch.nn.functional.grid_sample(features, 2.0 * coords - 1.0)
"""
    head = """\
import torch
from torch import nn

from ..points import sample_points


class Head(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        coords = torch.rand(x.shape[0], 8, 2, device=x.device)
        return self.proj(sample_points(x, coords).squeeze(-1).transpose(1, 2))
"""
    pkg = package(tmp_path / "pkg", {"points.py": points, "models/head.py": head})
    found = [(Path(f.path).name, f.line) for f in lint_paths([pkg]).findings]
    assert found == [("head.py", 13)]


_BASE = """\
import torch
from torch import nn


class BasePolicy(nn.Module):
    def blend(self, x, noise):
        return self.proj(x) + noise
"""

_POLICY = """\
import torch
from torch import nn

from ..base import BasePolicy


class FlowPolicy(BasePolicy):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        noise = torch.randn(x.shape, device=x.device)
        return self.blend(x, noise)
"""


@pytest.mark.parametrize("cast", [False, True])
def test_a_tensor_handed_to_a_method_of_a_base_class_of_another_folder(
    tmp_path: Path, cast: bool
) -> None:
    base = _BASE.replace("+ noise", "+ noise.to(x.dtype)") if cast else _BASE
    pkg = package(tmp_path / "pkg", {"base.py": base, "policies/flow.py": _POLICY})
    found = [(Path(f.path).name, f.line) for f in lint_paths([pkg]).findings]
    assert found == ([] if cast else [("flow.py", 13)])


_TREE = """\
import torch


class Tree:
    def __init__(self, weights):
        self.weights = weights

    @classmethod
    def build(cls, points, areas):
        total = torch.zeros(points.shape[0], dtype=points.dtype, device=points.device)
        return points * areas[:, None]
"""

_KERNEL = """\
import torch
from torch import nn

{import_line}


class Kernel(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, points):
        areas = torch.ones(points.shape[0], device=points.device)
        return self.proj({call}(points, areas))
"""


@pytest.mark.parametrize(
    ("import_line", "call"),
    [
        ("from ..geometry.tree import Tree", "Tree.build"),
        ("from ..geometry import ops", "ops.scale"),
        ("import pkg.geometry.ops as gops", "gops.scale"),
    ],
)
def test_a_tensor_handed_to_a_classmethod_or_a_module_function_of_another_folder(
    tmp_path: Path, import_line: str, call: str
) -> None:
    ops = "import torch\n\n\ndef scale(points, areas):\n    return points * areas[:, None]\n"
    kernel = _KERNEL.format(import_line=import_line, call=call)
    files = {"geometry/tree.py": _TREE, "geometry/ops.py": ops, "models/kernel.py": kernel}
    pkg = package(tmp_path / "pkg", files)
    found = [(Path(f.path).name, f.line) for f in lint_paths([pkg]).findings]
    assert found == [("kernel.py", 13)]


def test_values_written_into_a_table_made_fp32_on_purpose_stay_silent(tmp_path: Path) -> None:
    source = """\
import torch
from torch import nn


class Grid(nn.Module):
    def forward(self, x):
        table = torch.zeros(8, 2, dtype=torch.float, device=x.device)
        table[:, 0] = torch.arange(8, device=x.device) / 8.0
        table[:, 1] = torch.rand(8, device=x.device)
        return table
"""
    (tmp_path / "grid.py").write_text(source)
    assert lint_paths([tmp_path]).findings == []
    plain = source.replace("dtype=torch.float, ", "")
    (tmp_path / "grid.py").write_text(plain)
    assert [f.line for f in lint_paths([tmp_path]).findings] == [7, 8, 9]


_CODEC = """\
import torch
from torch import nn


class Codec(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.enc = nn.Linear(d, d)

    def encode(self, x, jitter):
        return self.enc(x) + jitter

    def forward(self, x):
        return self.enc(x)
"""

_AUTOENCODER = """\
import torch
from torch import nn

from ..codecs.codec import Codec


class AutoEncoder(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.codec = Codec(d)

    def forward(self, x):
        jitter = torch.randn(x.shape, device=x.device) * 0.01
        return self.codec.encode(x, jitter)
"""


@pytest.mark.parametrize("cast", [False, True])
def test_a_tensor_handed_to_a_method_of_a_submodule_of_another_folder(
    tmp_path: Path, cast: bool
) -> None:
    codec = _CODEC.replace("+ jitter", "+ jitter.to(x.dtype)") if cast else _CODEC
    files = {"codecs/codec.py": codec, "models/autoencoder.py": _AUTOENCODER}
    pkg = package(tmp_path / "pkg", files)
    found = [(Path(f.path).name, f.line) for f in lint_paths([pkg]).findings]
    assert found == ([] if cast else [("autoencoder.py", 13)])


def test_a_relative_path_with_names_imported_from_the_package_itself_is_linted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "__init__.py").write_text("")
    model = """\
import torch
from torch import nn

from . import ops


class Model(nn.Module):
    def forward(self, x):
        t = torch.zeros(3)
        ops.mix(t)
        return x
"""
    (tmp_path / "model.py").write_text(model)
    monkeypatch.chdir(tmp_path)
    assert lint_paths([Path(".")]).findings == []
