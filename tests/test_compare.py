from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from halfprec import convert
from halfprec.compare import Tolerance, compare, compare_outputs
from halfprec.errors import BrokenReferenceError, InputsError


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
    assert "1 of 100 values are inf/NaN where fp32 is finite" in cmp["output"].failures[0]


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
    with pytest.raises(
        InputsError, match=r"failed on batch 0 \(input: float32\[3, 5\]\) with RuntimeError"
    ):
        compare(model, convert(model, "fp16"), torch.randn(3, 5))


def test_candidate_that_raises_is_a_failed_comparison() -> None:
    class NoHalfKernel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.lin.weight.dtype != torch.float32:  # like an op without half kernels
                raise RuntimeError("no half kernel for this op")
            return self.lin(x)

    model = NoHalfKernel().eval()
    cmp = compare(model, convert(model, "fp16"), torch.randn(2, 4))
    assert not cmp.passed and "raised RuntimeError" in cmp.problems[0]


# -- no PASS without a finite reference and values actually compared -------------------------


class _Lin(nn.Module):
    def __init__(self, mode: str = "") -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)
        self.mode = mode

    def forward(self, x: torch.Tensor) -> object:
        y = self.norm(self.lin(x))
        return {"nan": y * float("nan"), "none": None, "string": "done"}.get(self.mode, y)


def _half(model: nn.Module) -> nn.Module:
    return convert(model.eval(), "fp16")


def test_all_nan_reference_is_a_broken_reference() -> None:
    model = _Lin("nan")
    with pytest.raises(
        BrokenReferenceError,
        match=r"fp32 reference itself is broken: output "
        r"'output' of batch 0 holds 6 NaN in 6 values",
    ) as info:
        compare(model, _half(model), torch.randn(2, 4))
    assert info.value.exit_code == 2 and "fix the fp32 run first" in str(info.value)


def test_inputs_that_overflow_fp32_are_a_broken_reference() -> None:
    model = _Lin()
    with pytest.raises(BrokenReferenceError, match="holds 6 NaN in 6 values"):
        compare(model, _half(model), torch.full((2, 4), 1e30))


def test_nan_weights_are_a_broken_reference() -> None:
    model = _Lin()
    with torch.no_grad():
        model.lin.weight[0, 0] = float("nan")
    with pytest.raises(BrokenReferenceError, match="broken"):
        compare(model, _half(model), torch.randn(2, 4))


def test_broken_reference_in_precomputed_outputs_raises() -> None:
    ref = torch.tensor([1.0, float("inf"), float("nan")])
    with pytest.raises(BrokenReferenceError, match="holds 1 NaN and 1 inf in 3 values"):
        compare_outputs([ref], [ref.clone()])


def test_empty_batch_compares_nothing_and_fails() -> None:
    model = _Lin()
    cmp = compare(model, _half(model), torch.randn(0, 4))
    assert not cmp.passed and cmp.compared == 0
    assert cmp["output"].reason == "0 values compared: the output is empty in every batch"
    assert math.isnan(cmp["output"].cosine) and math.isnan(cmp["output"].sqnr_db)
    assert cmp.reason.startswith("output: 0 values compared")


@pytest.mark.parametrize(("mode", "name"), [("none", "NoneType"), ("string", "str")])
def test_no_tensor_outputs_fail_with_a_reason(mode: str, name: str) -> None:
    model = _Lin(mode)
    cmp = compare(model, _half(model), torch.randn(2, 4))
    assert not cmp.passed and cmp.outputs == []
    assert cmp.reason.startswith(f"batch 0: the model returned no tensors ({name})")


def test_nan_at_another_position_inf_sign_flip_and_swaps_fail() -> None:
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    for cand in (
        torch.tensor([1.0, float("nan"), 3.0, 4.0]),
        torch.tensor([1.0, 2.0, float("-inf"), 4.0]),
        torch.tensor([float("inf"), 2.0, 3.0, float("nan")]),
    ):
        cmp = compare_outputs([ref], [cand])
        assert not cmp.passed
        assert "where fp32 is finite" in cmp["output"].reason
    # the same cases with the reference non-finite are refused, not judged
    for ref_bad, cand in (
        ([float("nan"), 1.0], [1.0, float("nan")]),
        ([float("inf"), 1.0], [float("-inf"), 1.0]),
        ([float("inf"), 1.0], [2.0, float("nan")]),
    ):
        with pytest.raises(BrokenReferenceError):
            compare_outputs([torch.tensor(ref_bad)], [torch.tensor(cand)])


def test_complex_outputs_compare_the_imaginary_part() -> None:
    ref = torch.complex(torch.randn(64), torch.randn(64))
    same_real = torch.complex(ref.real, -ref.imag)
    cmp = compare_outputs([ref], [same_real])
    assert not cmp.passed and cmp["output"].compared == 128
    assert "cosine" in cmp["output"].reason
    assert compare_outputs([ref], [ref.clone()]).passed


def test_complex_candidate_for_a_real_reference_is_a_problem() -> None:
    ref = torch.randn(4)
    cmp = compare_outputs([ref], [torch.complex(ref, torch.zeros(4))])
    assert not cmp.passed and "a complex output where fp32 gives floating" in cmp.reason


def test_passing_reason_says_what_was_compared() -> None:
    ref = {"a": torch.ones(2, 3), "ids": torch.arange(4)}
    cmp = compare_outputs([ref, ref], [ref, ref])
    assert cmp.passed and cmp.compared == 20
    assert cmp.reason == "1 output(s), 20 values compared over 2 batch(es), all within tolerance"
    assert cmp.to_json()["reason"] == cmp.reason


def test_colliding_output_paths_are_each_compared() -> None:
    """{'a.b': x, 'a': {'b': y}} and 0 / '0' once collided and dropped a tensor."""
    good, bad = torch.ones(4), torch.tensor([1.0, -1.0, 1.0, -1.0])
    ref = {"a.b": torch.ones(4), "a": {"b": torch.ones(4)}, 0: torch.ones(4), "0": torch.ones(4)}
    for key in ("a.b", 0):
        cand = {"a.b": good, "a": {"b": good}, 0: good, "0": good}
        cand[key] = bad
        cmp = compare_outputs([ref], [cand])
        assert not cmp.passed, key
        assert len(cmp.outputs) == 4 and cmp.compared == 16
        assert [o.path for o in cmp.outputs if not o.passed] == [f"[{key!r}]"]


def test_nan_tolerance_is_refused() -> None:
    for name in ("min_cosine", "min_sqnr_db", "max_rel_error", "min_argmax_agreement"):
        with pytest.raises(ValueError, match=rf"Tolerance\({name}=nan\): a NaN threshold"):
            Tolerance(**{name: math.nan})
        with pytest.raises(ValueError, match=rf"Tolerance\({name}='0.5'\): .* a number"):
            Tolerance(**{name: "0.5"})
    assert Tolerance(min_cosine=np.float32(0.99)).min_cosine == np.float32(0.99)


def test_tiny_fp32_outputs_that_underflow_in_half_fail() -> None:
    """fp32 outputs near 1e-24 are all zeros in fp16; that must not PASS, nor must -x."""
    torch.manual_seed(0)
    ref = torch.randn(8, 16) * 1e-24
    for cand in (ref.half(), (-ref).half().float(), -ref):
        cmp = compare_outputs([ref], [cand], dtype=torch.float16)
        assert not cmp.passed and "cosine" in cmp.reason
    assert compare_outputs([ref], [ref.clone()]).passed


class _CrashOnSecondBatch(nn.Module):
    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.exc = exc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.lin.weight.dtype != torch.float32 and x.shape[0] == 3:
            raise self.exc
        return self.lin(x)


@pytest.mark.parametrize("exc", [KeyError("past"), AssertionError("shape mismatch")])
def test_half_model_crashing_on_a_later_batch_fails_naming_the_batch(exc: Exception) -> None:
    model = _CrashOnSecondBatch(exc)
    batches = [torch.randn(2, 4), torch.randn(3, 4)]
    cmp = compare(model, _half(model), batches)
    assert not cmp.passed and cmp.outputs == []
    name = type(exc).__name__
    assert cmp.reason.startswith(f"batch 1: the half model raised {name}: ")


def test_fp32_model_raising_is_an_inputs_error_naming_the_inputs() -> None:
    model = _CrashOnSecondBatch(AssertionError("unused"))

    class Strict(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            assert x.shape[-1] == 4, f"expected 4 features, got {x.shape[-1]}"
            return model(x)

    with pytest.raises(InputsError) as info:
        compare(Strict(), Strict(), {"x": torch.randn(2, 5)})
    text = str(info.value)
    assert "batch 0 (x: float32[2, 5])" in text
    assert "AssertionError: expected 4 features, got 5" in text


def test_values_too_small_to_square_even_in_float64_fail_with_nan_metrics() -> None:
    ref = torch.full((4,), 1e-200, dtype=torch.float64)
    cmp = compare_outputs([ref], [ref * 2], dtype=torch.float16)
    m = cmp["output"]
    assert math.isnan(m.cosine) and math.isnan(m.sqnr_db) and m.max_abs > 0
    assert not cmp.passed and cmp.reason.startswith("output: cosine nan < 0.999")
    assert compare_outputs([ref], [ref.clone()]).passed  # equal is still equal
