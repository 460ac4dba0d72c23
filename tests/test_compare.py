from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from halfprec import convert
from halfprec.compare import Tolerance, compare, compare_outputs
from halfprec.errors import InputsError


def test_identical_outputs_pass_with_infinite_sqnr() -> None:
    out = {"a": torch.randn(4, 8)}
    cmp = compare_outputs([out], [out])
    assert cmp.passed
    m = cmp["a"]
    assert m.max_abs == 0 and m.sqnr_db == math.inf and m.cosine == pytest.approx(1.0)


def test_metrics_match_hand_computation() -> None:
    ref = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    cand = ref + torch.tensor([[0.0, 0.5, 0.0, -0.5]])
    m = compare_outputs([ref], [cand], tolerance=Tolerance(None, None))["output"]
    assert m.max_abs == pytest.approx(0.5)
    assert m.mean_abs == pytest.approx(0.25)
    assert m.max_rel == pytest.approx(0.5 / 4)
    assert m.sqnr_db == pytest.approx(10 * math.log10(30 / 0.5))
    cos = float(torch.nn.functional.cosine_similarity(ref.flatten(), cand.flatten(), dim=0))
    assert m.cosine == pytest.approx(cos, abs=1e-7)
    assert m.argmax_agreement == 1.0  # a 2-D "output" looks like logits


def test_new_nonfinite_values_fail_even_when_the_rest_matches() -> None:
    ref = torch.ones(100)
    cand = ref.clone()
    cand[3] = float("inf")
    cmp = compare_outputs([ref], [cand])
    assert not cmp.passed
    assert cmp["output"].nonfinite == 1
    assert "1 non-finite" in cmp["output"].failures[0]


def test_low_cosine_and_sqnr_fail_with_reasons() -> None:
    torch.manual_seed(0)
    ref = torch.randn(1000)
    cand = ref + 0.3 * torch.randn(1000)
    cmp = compare_outputs([ref], [cand], dtype=torch.float16)
    assert not cmp.passed
    text = " ".join(cmp["output"].failures)
    assert "cosine" in text and "SQNR" in text


def test_shape_mismatch_and_missing_paths_are_problems() -> None:
    cmp = compare_outputs([{"a": torch.ones(2), "b": torch.ones(1)}], [{"a": torch.ones(3)}])
    assert not cmp.passed
    assert any("shape" in p for p in cmp.problems) and any(
        "paths differ" in p for p in cmp.problems
    )


def test_argmax_agreement_on_logits() -> None:
    ref = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    cand = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    tol = Tolerance(None, None, min_argmax_agreement=0.9)
    cmp = compare_outputs([{"logits": ref}], [{"logits": cand}], tolerance=tol)
    assert cmp["logits"].argmax_agreement == 0.75 and not cmp.passed


def test_tolerance_validates() -> None:
    with pytest.raises(ValueError, match="min_cosine must be in"):
        Tolerance(min_cosine=2.0)
    with pytest.raises(ValueError, match="max_rel_error must be >= 0"):
        Tolerance(max_rel_error=-1)


def test_compare_models_over_batches_and_json() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).eval()
    half = convert(model, "fp16")
    batches = [torch.randn(8, 16), torch.randn(8, 16)]
    cmp = compare(model, half, batches)
    assert cmp.passed and cmp.batches == 2 and cmp.dtype == torch.float16
    assert cmp.worst_cosine > 0.999
    data = cmp.to_json()
    assert data["passed"] is True and data["outputs"][0]["path"] == "output"


def test_wrong_inputs_for_the_reference_raise_inputs_error() -> None:
    model = nn.Linear(4, 2)
    with pytest.raises(InputsError, match="fp32 model failed on the given inputs"):
        compare(model, convert(model, "fp16"), torch.randn(3, 5))


def test_candidate_that_raises_is_a_failed_comparison() -> None:
    class Fill(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).masked_fill(x > 0, -1e9)  # -1e9 does not fit fp16

    model = Fill().eval()
    cmp = compare(model, convert(model, "fp16"), torch.randn(2, 4))
    assert not cmp.passed and "raised RuntimeError" in cmp.problems[0]
