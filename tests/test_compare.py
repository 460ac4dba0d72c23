from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from halfprec import convert
from halfprec.compare import Tolerance, compare, compare_outputs
from halfprec.errors import BrokenReferenceError, InputsError
from support.tuned import HostSyncs


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


# -- found by the mutation pass (docs/development.md): boundaries, defaults, JSON -----------


@pytest.mark.parametrize(
    "ok",
    [
        {"min_cosine": -1.0},
        {"min_cosine": 1.0},
        {"max_rel_error": 0.0},
        {"max_rel_error": 0.5},
        {"min_argmax_agreement": 0.0},
        {"min_argmax_agreement": 1.0},
    ],
)
def test_tolerance_accepts_the_ends_of_each_range(ok: dict[str, float]) -> None:
    assert getattr(Tolerance(**ok), next(iter(ok))) == next(iter(ok.values()))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"min_cosine": -1.5}, r"min_cosine must be in \[-1, 1\], got -1.5"),
        ({"min_cosine": 1.01}, r"min_cosine must be in \[-1, 1\], got 1.01"),
        ({"max_rel_error": -0.1}, r"max_rel_error must be >= 0, got -0.1"),
        ({"min_argmax_agreement": 1.5}, r"min_argmax_agreement must be in \[0, 1\], got 1.5"),
        ({"min_argmax_agreement": -0.5}, r"min_argmax_agreement must be in \[0, 1\], got -0.5"),
    ],
)
def test_tolerance_refuses_values_outside_each_range(bad: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Tolerance(**bad)


def test_default_tolerances_are_the_documented_ones() -> None:
    # docs/verdicts.md: cosine >= 0.999 for both; SQNR >= 25 dB fp16, >= 20 dB bf16
    none = {"max_rel_error": None, "min_argmax_agreement": None}
    assert Tolerance.for_dtype(torch.float16) == Tolerance(0.999, 25.0, **none)
    assert Tolerance.for_dtype(torch.bfloat16) == Tolerance(0.999, 20.0, **none)
    assert Tolerance(min_cosine=0.5).resolve(torch.bfloat16) == Tolerance(0.5, 20.0, **none)
    assert Tolerance.for_dtype(None) == Tolerance.for_dtype(torch.float16)


@pytest.mark.parametrize(
    ("path", "shape", "is_logits"),
    [
        ("logits", (2, 3), True),
        ("end_scores", (2, 2), True),
        ("logits", (2, 1), False),  # one class: no argmax to agree on
        ("logits", (6,), False),
        ("output", (2, 2), True),  # a plain 2-D classifier output
        ("output", (2, 100_000), True),
        ("output", (2, 100_001), False),  # more like features than classes
        ("output", (2, 1), False),
        ("output", (2, 3, 4), False),
        ("hidden", (2, 3), False),
    ],
)
def test_argmax_agreement_is_measured_on_logit_like_outputs(
    path: str, shape: tuple[int, ...], is_logits: bool
) -> None:
    ref = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape) % 7
    half = ref.clone()
    half[..., 0] += 100.0  # every row's argmax moves to class 0 (when it has classes)
    outputs = ref if path == "output" else {path: ref}
    moved = half if path == "output" else {path: half}
    got = compare_outputs([outputs], [moved], tolerance=Tolerance(None, None))[path]
    if is_logits:
        assert got.argmax_agreement is not None and got.argmax_agreement < 1.0
    else:
        assert got.argmax_agreement is None


def test_json_holds_every_metric_of_the_comparison() -> None:
    ref = {"logits": torch.tensor([[1.0, 3.0], [2.0, 0.5]]), "ids": torch.tensor([1, 2])}
    half = {"logits": torch.tensor([[1.5, 3.0], [2.0, 2.5]]), "ids": torch.tensor([1, 2])}
    tol = Tolerance(min_cosine=0.9999, min_sqnr_db=None)
    cmp = compare_outputs([ref, ref], [half, half], tolerance=tol, dtype=torch.float16)
    out = cmp["logits"]
    assert out.to_json() == {
        "path": "logits",
        "shape": [2, 2],
        "elements": 8,
        "compared": 8,
        "max_abs": out.max_abs,
        "mean_abs": out.mean_abs,
        "max_rel": out.max_rel,
        "cosine": out.cosine,
        "sqnr_db": out.sqnr_db,
        "argmax_agreement": 0.5,
        "nonfinite": 0,
        "passed": False,
        "failures": out.failures,
        "reason": "; ".join(out.failures),
    }
    assert (out.max_abs, out.mean_abs) == (2.0, 0.625) and len(out.failures) == 1
    assert out.max_rel == pytest.approx(2.0 / 3.0)  # largest error / largest reference value
    assert out.cosine < 0.9999
    assert cmp.to_json() == {
        "passed": False,
        "reason": f"logits: {out.failures[0]}",
        "dtype": "fp16",
        "batches": 2,
        "compared": 12,  # 8 logits and 4 exact ids
        "tolerance": {
            "min_cosine": 0.9999,
            "min_sqnr_db": None,
            "max_rel_error": None,
            "min_argmax_agreement": None,
        },
        "reference": "IEEE fp32",
        "reference_set_aside": list(cmp.set_aside),
        "problems": [],
        "outputs": [out.to_json()],
    }


def test_without_a_tolerance_the_dtypes_defaults_judge() -> None:
    ref = torch.linspace(1.0, 2.0, 1000)
    half = ref * 1.075  # cosine 1, SQNR 22.5 dB: between bf16's 20 and fp16's 25
    assert compare_outputs([ref], [half], dtype=torch.bfloat16).passed
    fp16 = compare_outputs([ref], [half], dtype=torch.float16)
    assert not fp16.passed and fp16["output"].failures == ["SQNR 22.5 dB < 25.0 dB"]


def test_a_value_on_each_threshold_passes_and_each_failure_is_named() -> None:
    ref = {"logits": torch.tensor([[1.0, 3.0], [2.0, 0.5]])}
    half = {"logits": torch.tensor([[1.5, 3.0], [2.0, 2.5]])}
    m = compare_outputs([ref], [half], tolerance=Tolerance(None, None))["logits"]
    exact = Tolerance(m.cosine, m.sqnr_db, m.max_rel, m.argmax_agreement)
    assert compare_outputs([ref], [half], tolerance=exact).passed  # on the line is within
    strict = Tolerance(None, None, max_rel_error=0.1, min_argmax_agreement=0.9)
    failed = compare_outputs([ref], [half], tolerance=strict)["logits"]
    assert failed.failures == ["max rel error 0.667 > 0.1", "argmax agreement 0.500 < 0.9"]


def test_structure_and_exact_value_problems_are_named() -> None:
    ref = {"a": torch.ones(2), "b": torch.ones(2), "c": torch.ones(2), "d": torch.ones(2)}
    other = {"w": torch.ones(2), "x": torch.ones(2), "y": torch.ones(2), "z": torch.ones(2)}
    paths = compare_outputs([ref], [other], tolerance=Tolerance())
    assert paths.problems == ["batch 0: output paths differ (a, b, c)"]
    for ids, wrong in [
        (torch.tensor([1, 2]), torch.tensor([1, 3])),
        (torch.tensor([True, False]), torch.tensor([True, True])),
    ]:
        ref2 = {"y": torch.ones(2), "ids": ids}
        cmp = compare_outputs([ref2, ref2], [ref2, {"y": torch.ones(2), "ids": wrong}])
        assert cmp.problems == ["ids: non-floating output differs from the reference"]
    with pytest.raises(KeyError, match=r"no output 'nope'; outputs are \['y'\]"):
        cmp["nope"]


def test_a_broken_reference_names_its_output_and_batch() -> None:
    ok, bad = torch.ones(3), torch.tensor([1.0, math.nan, math.inf])
    with pytest.raises(
        BrokenReferenceError,
        match=r"output 'y' of batch 1 holds 1 NaN and 1 inf in 3 values, .*fix the fp32 run "
        r"first \(NaN/inf in the weights",
    ):
        compare_outputs([{"y": ok}, {"y": bad}], [{"y": ok}, {"y": ok}])


class _Raises(nn.Module):
    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.exc = exc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise self.exc


def test_a_failing_model_is_named_by_the_first_line_of_its_error() -> None:
    x = torch.ones(1, 2)
    batch = r"fp32 model failed on batch 0 \(input: float32\[1, 2\]\) with "
    with pytest.raises(InputsError, match=batch + r"ValueError: bad shape;"):
        compare(_Raises(ValueError("bad shape\nmore detail")), nn.Linear(2, 2), x)
    with pytest.raises(InputsError, match=batch + r"KeyError"):
        compare(_Raises(KeyError()), nn.Linear(2, 2), x)
    half = compare(nn.Linear(2, 2), _Raises(RuntimeError("no kernel\ntrace")), x)
    assert half.problems == ["batch 0: the half model raised RuntimeError: no kernel"]


def test_compare_judges_with_the_given_tolerance_or_the_candidates_dtype() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).eval()
    x = torch.randn(4, 8)
    half = convert(model, "bf16")
    auto = compare(model, half, x)
    assert auto.dtype == torch.bfloat16 and auto.tolerance == Tolerance.for_dtype(torch.bfloat16)
    strict = compare(model, half, x, tolerance=Tolerance(min_sqnr_db=200.0))
    assert not strict.passed and strict.tolerance.min_sqnr_db == 200.0
    raised = compare(model, _Raises(RuntimeError("no kernel")).to(torch.bfloat16), x)
    assert (raised.outputs, raised.batches, raised.dtype) == ([], 1, torch.bfloat16)
    assert raised.tolerance == Tolerance.for_dtype(torch.bfloat16) and not raised.passed


def test_each_output_is_judged_on_its_own_including_3d_logits() -> None:
    # [batch, sequence, vocab] logits: agreement is over the vocabulary, per position
    ref = torch.zeros(2, 3, 5)
    ref[..., 4] = 1.0  # every position picks token 4
    half = ref.clone()
    half[0, :, 0] = 2.0  # the first sequence picks token 0 at its 3 positions
    cmp = compare_outputs(
        [{"extra": torch.ones(1), "logits": ref, "hidden": torch.ones(2, 4)}],
        [{"logits": half, "hidden": torch.ones(2, 4)}],
        tolerance=Tolerance(None, None),
    )
    assert [o.path for o in cmp.outputs] == ["logits", "hidden"]  # the missing first is skipped
    assert cmp["logits"].argmax_agreement == 0.5 and cmp["hidden"].argmax_agreement is None
    assert cmp.problems == ["batch 0: output paths differ (extra)"]


def test_exact_outputs_compare_values_and_a_tensorless_output_is_named() -> None:
    ids, ids32 = torch.tensor([1, 2]), torch.tensor([1, 2], dtype=torch.int32)
    cmp = compare_outputs([{"y": torch.ones(2), "ids": ids}], [{"y": torch.ones(2), "ids": ids32}])
    assert cmp.passed and cmp.exact_values == 2
    nothing = compare_outputs(["text"], ["text"])
    assert nothing.problems == [
        "batch 0: the model returned no tensors (str), so nothing was compared; return a "
        "tensor, or a dict/tuple/list of tensors"
    ]
    with pytest.raises(InputsError, match=r"check the inputs' names, shapes and dtypes against "):
        compare(_Raises(TypeError("x")), nn.Linear(2, 2), torch.ones(1, 2))


def test_a_broken_reference_is_refused_before_the_half_model_runs() -> None:
    class NaNs(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * math.nan

    # the half model would raise; the broken fp32 reference is what the caller must hear
    with pytest.raises(BrokenReferenceError, match="output 'output' of batch 0 holds 2 NaN"):
        compare(NaNs(), _Raises(RuntimeError("never reached")), torch.ones(1, 2))


def test_tensorless_batches_are_one_problem() -> None:
    assert len(compare_outputs(["a", "b"], ["a", "b"]).problems) == 1


class _ThreeOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.norm = nn.Linear(16, 16), nn.Linear(16, 16), nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"x": self.a(x), "y": self.norm(self.b(x)), "z": self.a(x) * 2}


def test_check_reads_the_device_once_per_output_and_batch() -> None:
    """The sync budget of a comparison (what check runs): one read per output per batch
    (was 8, one per statistic)."""
    model = _ThreeOutputs().eval()
    half = convert(model, "bf16")
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randn(4, 16, generator=gen) for _ in range(2)]
    with HostSyncs() as syncs:
        result = compare(model, half, batches)
    assert len(result.outputs) == 3 and result.passed
    assert syncs.count == 3 * 2
