"""Every fp32 reference is IEEE fp32, whatever the process set, and the setting comes back.

A user's ``torch.backends.mkldnn.matmul.fp32_precision = "bf16"`` (or CUDA's ``"tf32"``)
would make a "fp32" reference a half-like one. Each verb that computes a reference runs it
under :func:`halfprec.fp32.exact_fp32` and says so in its report; the model below records
the precision its forward ran under."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils.flop_counter import FlopCounterMode

import halfprec
from halfprec.compare import Comparison
from halfprec.fp32 import exact_fp32

BACKENDS = torch.backends


def _counting_flops() -> bool:
    """tune counts the fp32 model's FLOPs (a FlopCounterMode): a call that is no reference."""
    stack = _get_current_dispatch_mode_stack()
    return any(type(m).__module__ == FlopCounterMode.__module__ for m in stack)


class Records(nn.Module):
    """A linear model that records the fp32 matmul precision of each forward."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 4)
        self.seen: list[tuple[str, str]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _counting_flops():
            self.seen.append(
                (BACKENDS.mkldnn.matmul.fp32_precision, BACKENDS.cuda.matmul.fp32_precision)
            )
        return self.proj(x)


@pytest.fixture
def reduced() -> Iterator[None]:
    """The process asks for bf16 oneDNN and TF32 CUDA matmuls; the test's end restores it."""
    leaves = [BACKENDS.mkldnn.matmul, BACKENDS.cuda.matmul]
    old = [leaf.fp32_precision for leaf in leaves]
    BACKENDS.mkldnn.matmul.fp32_precision = "bf16"
    BACKENDS.cuda.matmul.fp32_precision = "tf32"
    yield
    for leaf, value in zip(leaves, old, strict=True):
        leaf.fp32_precision = value


def _compare(model: nn.Module, x: torch.Tensor, tmp: Path) -> Comparison:
    return halfprec.compare(model, halfprec.convert(model, "bf16"), x)


def _check(model: nn.Module, x: torch.Tensor, tmp: Path) -> Comparison:
    return halfprec.check(model, x, "bf16", runs=0).comparison


def _diagnose(model: nn.Module, x: torch.Tensor, tmp: Path) -> Comparison:
    return halfprec.diagnose(model, x, "bf16").output


def _tune(model: nn.Module, x: torch.Tensor, tmp: Path) -> Comparison:
    report = halfprec.tune(model, [x, x + 1], "bf16", max_evaluations=2).report
    assert report.confirmation is not None
    return report.confirmation


def _export(model: nn.Module, x: torch.Tensor, tmp: Path) -> Comparison:
    return halfprec.export(model, x, tmp / "m.ts", "bf16").comparison


VERBS: list[Callable[[nn.Module, torch.Tensor, Path], Comparison]] = [
    _compare,
    _check,
    _diagnose,
    pytest.param(_tune, marks=pytest.mark.slow),  # type: ignore[list-item]
    _export,
]


@pytest.mark.usefixtures("reduced")
@pytest.mark.parametrize("verb", VERBS, ids=["compare", "check", "diagnose", "tune", "export"])
def test_the_reference_runs_in_ieee_fp32_and_the_setting_is_restored(
    verb: Callable[[nn.Module, torch.Tensor, Path], Comparison], tmp_path: Path
) -> None:
    model = Records().eval()
    cmp = verb(model, torch.randn(2, 8), tmp_path)
    assert model.seen and set(model.seen) == {("ieee", "ieee")}  # every fp32 call
    assert BACKENDS.mkldnn.matmul.fp32_precision == "bf16"
    assert BACKENDS.cuda.matmul.fp32_precision == "tf32"
    assert cmp.to_json()["reference"] == "IEEE fp32"
    assert "oneDNN matmuls in bf16" in cmp.set_aside  # CUDA's only where CUDA is
    assert ("CUDA matmuls in tf32" in cmp.set_aside) == torch.cuda.is_available()
    assert "set aside" in cmp.reference and "oneDNN matmuls in bf16" in cmp.reference


def test_without_a_reduced_setting_the_report_says_plain_ieee_fp32() -> None:
    with exact_fp32():  # as a process that set nothing below fp32 (cuDNN's default included)
        model = Records().eval()
        cmp = halfprec.compare(model, halfprec.convert(model, "bf16"), torch.randn(2, 8))
    assert cmp.reference == "IEEE fp32" and cmp.to_json()["reference_set_aside"] == []
