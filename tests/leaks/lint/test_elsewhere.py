"""A helper that another file of the package defines and that takes no tensor (a noise or
grid factory) is walked when a forward path calls it, by an imported name (relative or
absolute) or as an attribute of an imported module; its factory is reported at its line in
the helper's file, once however many files call it. Each package here is small and written
for this test; the torch run shows what the model does in half."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from halfprec.leaks.lint import lint_paths
from support.lint_models import package

_NOISE = """\
import torch


def make_noise(h, w, device=None):
    return torch.rand(h, w, device=device) * 2 - 1
"""

_CAST = """\
import torch


def make_noise(h, w, device=None, dtype=None):
    return (torch.rand(h, w, device=device) * 2 - 1).to(dtype)
"""

_MODEL = """\
import torch
from torch import nn

{import_line}


class Blend(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, img):
        return self.proj(img + {call}(img.shape[0], img.shape[1], img.device{extra}))
"""

_FORMS = {
    "relative": ("from .noise import make_noise", "make_noise"),
    "absolute": ("from pkg.noise import make_noise", "make_noise"),
    "module alias": ("import pkg.noise as U", "U.make_noise"),
}


def _package(tmp_path: Path, form: str, noise: str = _NOISE, extra: str = "") -> Path:
    import_line, call = _FORMS[form]
    model = _MODEL.format(import_line=import_line, call=call, extra=extra)
    return package(tmp_path / "pkg", {"noise.py": noise, "model.py": model})


def _found(pkg: Path) -> list[tuple[str, int, str]]:
    report = lint_paths([pkg])
    return sorted((Path(f.path).name, f.line, f.code) for r in report.files for f in r.findings)


def _run_half(tmp_path: Path) -> torch.Tensor:
    sys.path.insert(0, str(tmp_path))
    try:
        model = importlib.import_module("pkg.model").Blend(4).half()
        return model(torch.randn(4, 4).half())
    except RuntimeError as exc:  # fp32 meets the half layer's weight
        assert "dtype" in str(exc) or "Half" in str(exc) or "Float" in str(exc)
        return torch.empty(0, dtype=torch.float32)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "pkg" or n.startswith("pkg.")]:
            del sys.modules[name]


@pytest.mark.parametrize("form", sorted(_FORMS))
def test_a_factory_in_a_tensor_less_helper_of_another_file_is_reported_there(
    tmp_path: Path, form: str
) -> None:
    pkg = _package(tmp_path, form)
    assert _run_half(tmp_path).dtype == torch.float32  # the noise promotes img to fp32
    assert _found(pkg) == [("noise.py", 5, "HP101")]


def test_a_helper_that_casts_its_result_stays_silent(tmp_path: Path) -> None:
    pkg = _package(tmp_path, "relative", _CAST, extra=", img.dtype")
    assert _run_half(tmp_path).dtype == torch.float16
    assert _found(pkg) == []


def test_a_helper_two_models_call_is_reported_once(tmp_path: Path) -> None:
    pkg = _package(tmp_path, "relative")
    (pkg / "other.py").write_text((pkg / "model.py").read_text().replace("Blend", "Mix"))
    assert _found(pkg) == [("noise.py", 5, "HP101")]
