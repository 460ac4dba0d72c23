"""Saturating fills: out-of-range fill constants in half modules become the finite limit."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from halfprec import Recipe, convert
from halfprec.convert import conversion_report
from halfprec.convert.fills import SaturatingFills


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
    assert "saturating fills" in repr(half).splitlines()[0]  # visible in print(model)


def _filled(dtype: torch.dtype, value: float) -> torch.Tensor:
    mask = torch.tensor([True, False])
    with SaturatingFills(dtype):
        return torch.zeros(2, dtype=dtype).masked_fill(mask, value)


def test_out_of_range_fills_saturate_and_in_range_or_infinite_ones_are_left_alone() -> None:
    assert _filled(torch.float16, -1e9)[0].item() == -65504.0
    assert _filled(torch.float16, 1e9)[0].item() == 65504.0
    assert _filled(torch.float16, -float("inf"))[0].item() == -float("inf")
    assert _filled(torch.float16, -100.0)[0].item() == -100.0
    assert _filled(torch.bfloat16, -1e9)[0].item() == torch.tensor(-1e9).bfloat16().item()
    model = RootMasking(-float("inf"), "masked_fill").eval()
    half = convert(model, "fp16")
    with torch.no_grad():
        assert torch.isfinite(half(*_inputs())).all()  # softmax of -inf rows is still 0


def test_models_without_fill_ops_get_no_guard() -> None:
    half = convert(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), "fp16")
    report = conversion_report(half)
    assert report is not None and report.fill_guards == []


def test_bf16_keeps_constants_that_fit() -> None:
    model = RootMasking(-1e9, "masked_fill").eval()
    half = convert(model, "bf16")
    x, mask = _inputs()
    with torch.no_grad():
        ref = model(x, mask)
        torch.testing.assert_close(half(x, mask), ref, atol=2e-2, rtol=2e-2)


# -- every fill op, positional and by keyword (SaturatingFills itself) ----------------------------
_MASK = torch.tensor([[True, False, True], [False, True, False]])
_FILLS = {
    "masked_fill": lambda x: x.masked_fill(_MASK, -1e9),
    "masked_fill value=": lambda x: x.masked_fill(_MASK, value=-1e9),
    "masked_fill_": lambda x: x.clone().masked_fill_(_MASK, -1e9),
    "fill_": lambda x: x.clone().fill_(-1e9),
    "fill_ value=": lambda x: x.clone().fill_(value=-1e9),
    "full": lambda x: torch.full((2, 3), -1e9, dtype=x.dtype),
    "full fill_value=": lambda x: torch.full((2, 3), fill_value=-1e9, dtype=x.dtype),
    "full_like": lambda x: torch.full_like(x, -1e9),
    "full_like fill_value=": lambda x: torch.full_like(x, fill_value=-1e9),
    "new_full": lambda x: x.new_full((2, 3), -1e9),
    "new_full fill_value=": lambda x: x.new_full((2, 3), fill_value=-1e9),
    "where other": lambda x: torch.where(_MASK, x, -1e9),
    "where input": lambda x: torch.where(~_MASK, -1e9, x),
    "where other=": lambda x: torch.where(_MASK, x, other=-1e9),
    "where input= other=": lambda x: torch.where(_MASK, input=x, other=-1e9),
    "Tensor.where": lambda x: x.where(_MASK, -1e9),
    "where self=": lambda x: torch.where(~_MASK, self=-1e9, other=x),  # a scalar first
}


@pytest.mark.parametrize("how", list(_FILLS))
def test_each_fill_op_saturates_its_constant_wherever_it_is_passed(how: str) -> None:
    fill = _FILLS[how]
    x = torch.zeros(2, 3, dtype=torch.float16)
    want = fill(torch.zeros(2, 3)).clamp(min=-65504).half()  # fp32, then saturated by hand
    with SaturatingFills(torch.float16):
        got = fill(x)
    assert got.dtype == torch.float16 and torch.equal(got, want)
    assert (got == -65504).any()


def test_fills_of_another_dtype_or_without_floats_are_left_alone() -> None:
    with SaturatingFills(torch.float16):
        fp32 = torch.zeros(2, 3).masked_fill(_MASK, -1e9)  # an fp32 fill in a half model
        ints = torch.zeros(3, dtype=torch.long).fill_(5)
        added = torch.zeros(2, dtype=torch.float16) + 1
    assert fp32.min() == -1e9 and ints.tolist() == [5, 5, 5] and added.tolist() == [1, 1]
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    try:  # torch.full without a dtype fills the default dtype
        with SaturatingFills(torch.float16):
            full = torch.full((2,), -1e9)
    finally:
        torch.set_default_dtype(old)
    assert full.dtype == torch.float16 and full.tolist() == [-65504, -65504]


class KeywordMasking(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
        return self.proj(x).masked_fill(mask, -1e9).softmax(-1)


def test_a_saturating_module_takes_keyword_arguments() -> None:
    torch.manual_seed(0)
    model = KeywordMasking().eval()
    x, mask = torch.randn(2, 4), torch.tensor([[True, False, False, True]] * 2)
    half = convert(model, Recipe(dtype="fp16", fp32_ops=()))
    torch.testing.assert_close(half(x, mask=mask), model(x, mask=mask), atol=2e-3, rtol=0)
