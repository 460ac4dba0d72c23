"""Saturating fills: out-of-range fill constants in half modules become the finite limit."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from halfprec import convert
from halfprec.convert import conversion_report


class RootMasking(nn.Module):
    """The hazard inline in the root's own forward: no submodule can be made an island."""

    def __init__(self, fill: float, how: str) -> None:
        super().__init__()
        self.q = nn.Linear(16, 16)
        self.fill, self.how = fill, how

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.q(x)
        scores = h @ h.transpose(-1, -2) / math.sqrt(16)
        if self.how == "masked_fill":
            scores = scores.masked_fill(mask[:, None, :] == 0, self.fill)
        elif self.how == "where":
            scores = torch.where(mask[:, None, :] == 0, self.fill, scores)
        else:  # a bias made with full(), added
            bias = torch.full(scores.shape, self.fill, dtype=scores.dtype)
            scores = scores + torch.where(mask[:, None, :] == 0, bias, bias.new_full((), 0.0))
        return scores.softmax(-1) @ h


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 3:] = 0
    return x, mask


@pytest.mark.parametrize(
    ("fill", "how"),
    [
        (-1e9, "masked_fill"),
        (torch.finfo(torch.float32).min, "masked_fill"),
        (-1e9, "where"),
        (-1e9, "full"),
    ],
)
def test_root_fill_beyond_fp16_matches_fp32_masking(fill: float, how: str) -> None:
    torch.manual_seed(0)
    model = RootMasking(fill, how).eval()
    x, mask = _inputs()
    with torch.no_grad():
        ref = model(x, mask)
        naive_fails = True
        try:
            naive = model.half()(x.half(), mask)
            naive_fails = not bool(torch.isfinite(naive).all()) if how == "full" else False
        except RuntimeError:
            pass
        model.float()
        half = convert(model, "fp16")
        out = half(x, mask)
    assert naive_fails or how != "masked_fill"
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    report = conversion_report(half)
    assert report is not None and report.fill_guards == [""]
    [(where, what)] = report.saturated_fills.items()
    assert where.endswith(f"{__file__}:{_line_of(how)}")
    assert what.endswith("-> -65504")


def _line_of(how: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(RootMasking.forward)
    token = {"masked_fill": "masked_fill(", "where": "torch.where(mask", "full": "torch.full("}[how]
    return start + next(i for i, line in enumerate(lines) if token in line)


def test_in_range_and_infinite_fills_are_left_alone() -> None:
    model = RootMasking(-float("inf"), "masked_fill").eval()
    half = convert(model, "fp16")
    with torch.no_grad():
        half(*_inputs())
    report = conversion_report(half)
    assert report is not None and report.saturated_fills == {}


def test_models_without_fill_ops_get_no_guard() -> None:
    half = convert(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), "fp16")
    report = conversion_report(half)
    assert report is not None and report.fill_guards == []


def test_bf16_keeps_constants_that_fit() -> None:
    model = RootMasking(-1e9, "masked_fill").eval()
    half = convert(model, "bf16")
    with torch.no_grad():
        half(*_inputs())
    report = conversion_report(half)
    assert report is not None and report.saturated_fills == {}  # -1e9 fits bf16
