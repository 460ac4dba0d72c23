"""tune: finds small fp32 islands that make every hazard model meet the tolerance."""

from __future__ import annotations

import importlib
import io

import pytest
import torch
from rich.console import Console
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from halfprec import Recipe, convert, tune
from halfprec.compare import compare
from halfprec.errors import DTypeError, HalfprecError
from halfprec.report.tune import print_tune
from halfprec.timing import Timing
from halfprec.tune import ToleranceUnreachableError
from halfprec.tune.results import TuneConfig
from testbed.hazards import (
    HAZARDS,
    ExpSoftmax,
    dropout_model,
    dropout_model_example_inputs,
)
from testbed.heldout import CONTROL, HELDOUT

LOCAL = [
    "fill-1e9",
    "rmsnorm-overflow",
    "eps-1e-12",
    "exp-softmax",
    "int-dict-positions",
    "shared-loop",
]


RAW_FP16 = Recipe(
    "fp16", fp32_ops=(), fp32_inputs=False, fp32_params_up_to=0
)  # the hazards as .half() meets them: no op policy, every parameter half


@pytest.mark.parametrize("name", list(HAZARDS))
def test_tune_makes_every_hazard_finite_and_within_tolerance(name: str) -> None:
    hazard = HAZARDS[name]
    model, batches = hazard.build()
    result = tune(model, batches, RAW_FP16)
    assert result.passed, result.report.variants[0].note
    assert result.model is not None
    check = compare(model, result.model, batches)
    assert check.passed, check.problems
    assert all(o.nonfinite == 0 for o in check.outputs)
    if hazard.prevented_by_convert:
        assert result.keep_fp32 == ()
    else:
        fixed = result.keep_fp32 + tuple(o.module for o in result.report.op_islands)
        assert any(hazard.culprit == k or hazard.culprit.startswith(k + ".") for k in fixed), fixed
    if name in LOCAL:
        assert result.report.fp32_share < 0.05
    assert result.report.passes >= len(result.report.variants[0].evaluations)


def test_islands_can_be_non_contiguous() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 16), ExpSoftmax(), nn.Linear(16, 64), nn.Linear(64, 16), ExpSoftmax()
    ).eval()
    with torch.no_grad():
        model[0].weight.mul_(40.0)
        model[3].weight.mul_(80.0)
    batches = [(torch.randn(8, 16, generator=torch.Generator().manual_seed(i)),) for i in range(2)]
    seen: list[str] = []
    result = tune(model, batches, RAW_FP16, progress=seen.append)
    assert result.passed
    fixed = set(result.keep_fp32) | {o.module for o in result.report.op_islands}
    assert fixed == {"1", "4"}
    assert len(seen) == len(result.report.variants[0].evaluations)
    assert seen[0].startswith("fp16: try 1, 0 islands, fail")
    diag = result.report.variants[0].diagnosis
    assert diag is not None and diag.culprit == "1"


def test_recipe_file_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, batches = HAZARDS["rmsnorm-overflow"].build()
    result = tune(model, batches, RAW_FP16)
    path = tmp_path / "recipe.json"
    result.require_recipe().save(path)
    recipe = Recipe.load(path)
    assert recipe == result.recipe and recipe.dtype == torch.float16
    assert "norm" in recipe.keep_fp32 or {o.module for o in recipe.op_islands} == {"norm"}
    assert recipe.info["passes"] == result.report.passes
    deployed = convert(model, path)
    assert compare(model, deployed, batches).passed
    assert not compare(model, convert(model, RAW_FP16), batches).passed


def test_dropout_in_train_mode_is_reported_plainly() -> None:
    model = dropout_model()
    with pytest.raises(ToleranceUnreachableError, match="train mode.*model.eval"):
        tune(model, dropout_model_example_inputs(), RAW_FP16)


def test_budget_too_small_returns_no_policy() -> None:
    model, batches = HAZARDS["exp-softmax"].build()
    result = tune(model, batches, RAW_FP16, max_evaluations=1)
    assert not result.passed and result.model is None
    assert "max_evaluations=1" in result.report.variants[0].note
    assert result.recipe is None
    with pytest.raises(HalfprecError, match="no recipe"):
        result.require_recipe()


def test_auto_picks_the_fastest_passing_dtype() -> None:
    model, batches = HAZARDS["exp-softmax"].build()
    result = tune(model, batches, "auto")
    variants = {v.dtype: v for v in result.report.variants}
    assert set(variants) == {torch.float16, torch.bfloat16}
    assert all(v.passed and v.latency is not None for v in variants.values())
    fastest = min(variants.values(), key=lambda v: v.latency or 0.0)
    assert result.report.dtype == fastest.dtype
    assert result.report.reason.startswith("auto: fastest variant meeting the tolerance")
    assert result.report.fp32_latency is not None


def _timed(monkeypatch: pytest.MonkeyPatch, *timings: tuple[float, ...]) -> list[int]:
    """Inject the interleaved timings tune measures (fp32 first, then each passing dtype)."""
    seen: list[int] = []

    def fake(fns, *, device, runs):  # type: ignore[no-untyped-def]
        seen.append(len(fns))
        return [Timing(t) for t in timings]

    # halfprec.tune is also the name of the function: reach the module itself
    core = importlib.import_module("halfprec.tune.core")
    monkeypatch.setattr(core, "measure_interleaved", fake)
    return seen


def test_auto_says_when_its_timings_are_too_noisy_to_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # both dtypes' rounds swing 4x against each other and 2x either way against fp32
    seen = _timed(monkeypatch, (1.0, 1.0, 1.0, 1.0), (0.5, 2.0, 0.5, 2.0), (2.0, 0.5, 2.0, 0.5))
    model, batches = HAZARDS["exp-softmax"].build()
    reason = tune(model, batches, "auto").report.reason
    assert seen == [3]  # fp32 and both passing dtypes, in one interleaved measurement
    assert "median of 4 interleaved rounds" in reason
    assert ": too noisy to rank (IQR 0.25-4.00x over 4 rounds)" in reason  # half vs half
    assert "against fp32: too noisy to rank (IQR 0.50-2.00x over 4 rounds)" in reason
    assert "faster" not in reason and "slower" not in reason


def test_auto_ranks_a_steady_ratio_whatever_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    _timed(monkeypatch, (2.0, 20.0, 4.0, 40.0), (1.5, 15.0, 3.0, 30.0), (1.0, 10.0, 2.0, 20.0))
    model, batches = HAZARDS["exp-softmax"].build()
    result = tune(model, batches, "auto")
    second = result.report.variants[1].dtype  # the variant timed third, steadily fastest
    assert result.report.dtype == second
    assert "too noisy" not in result.report.reason
    assert result.report.reason.endswith(
        "against fp32: 2.00x faster (IQR 2.00-2.00x over 4 rounds)"
    )


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="max_evaluations"):
        TuneConfig(max_evaluations=0)
    with pytest.raises(DTypeError, match="not a half dtype"):
        Recipe(dtype="fp32")


class Squares(nn.Module):
    """(1000 * x)^2 / 1e6 by plain multiplications: fine in fp16 while |x| < 0.25."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x) * 1000.0
        return (y * y) / 1e6


def test_a_recipe_that_fails_on_an_unseen_range_is_not_a_pass() -> None:
    torch.manual_seed(0)
    model = Squares().eval()
    nn.init.eye_(model.lin.weight)
    nn.init.zeros_(model.lin.bias)
    g = torch.Generator().manual_seed(0)
    small = (torch.rand(4, 8, generator=g) * 0.1,)  # products up to 1e4: fit fp16
    large = (torch.rand(4, 8, generator=g) * 4.0,)  # products up to 1.6e7: inf in fp16
    result = tune(model, [small, large], "fp16", max_evaluations=4)
    report = result.report
    assert report.batches == 1 and report.calibrated is True  # searched on `small` only
    assert report.confirmation is not None and report.confirmed is False
    assert not result.passed and result.recipe is None
    assert "fails on 1 batch(es) it was not tuned on" in report.reason
    again = tune(model, [small], "fp16", validate=[large], max_evaluations=4)
    assert again.report.calibrated and not again.passed  # --validate batches: the same
    seen = tune(model, [large, small], "fp16", max_evaluations=8)  # tuned on the wide range
    assert seen.passed and seen.report.confirmed is True and seen.report.op_islands


def test_never_called_and_parameterless_modules_are_candidates() -> None:
    """VQ: the quantiser has no parameters and an integer output (no local error), and the
    codebook is never called (its weight is passed on): both are candidates, and the fix
    keeps the codebook and the encoder in fp32, the cheaper of the sets that pass."""
    model, batches = HELDOUT["vq-argmin"].build()
    result = tune(model, batches[:1], "fp16")
    report = result.report
    assert result.passed, report.reason
    assert {"codebook", "quantize"} <= set(report.variants[0].candidates)
    assert set(report.keep_fp32) == {"codebook", "encoder"}
    assert report.fp32_flops_share is not None and report.fp32_flops_share < 0.25
    assert compare(model, result.model, batches).passed


class Cancel(nn.Module):
    """(h + c) - c: half rounds h to the step of c (0.25 at 256, 0.0625 at 120)."""

    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return (h + self.c) - self.c


class Mix(Cancel):
    """Parameterless, and most of the model's FLOPs: (y y^T) y / n after the cancellation."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        y = super().forward(h)
        return (y @ y.transpose(-1, -2)) @ y / y.shape[-2]


class Proj(Cancel):
    def __init__(self, c: float) -> None:
        super().__init__(c)
        self.w = nn.Linear(16, 16)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.w(super().forward(h))


class TwoPaths(nn.Module):
    """Two rounded paths: fp16 fails with both, passes with either one in fp32. ``mix`` is
    the broken module (its own error is beyond the threshold) and costs ~80% of the FLOPs;
    ``inp`` or ``proj`` in fp32 costs ~10% and fixes it too."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(16, 16)
        self.mix = Mix(256.0)
        self.proj = Proj(120.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        return 0.5 * self.mix(h) + self.proj(h)


def test_tune_prefers_the_fix_that_keeps_fewer_flops_in_fp32() -> None:
    torch.manual_seed(0)
    model = TwoPaths().eval()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(2, 64, 16, generator=g),) for _ in range(2)]
    assert not compare(model, convert(model, "fp16"), batches).passed
    assert compare(model, convert(model, Recipe("fp16", keep_fp32=("mix",))), batches).passed
    result = tune(model, batches, "fp16")
    share = result.report.fp32_flops_share
    assert result.passed and "mix" not in result.report.keep_fp32, result.report.keep_fp32
    assert share is not None and share < 0.2  # "mix" alone: ~0.8


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_tune_hands_an_island_s_output_on_in_fp32_rather_than_keep_the_block(dtype: str) -> None:
    """PonderNet's halting probability fits the dtype but rounds to 1.0, and log(1 - p) in
    the sibling module is -inf: before the hand-off, tune kept the whole step (99% of the
    FLOPs) in fp32."""
    model, batches = HELDOUT["halting-handoff"].build()
    result = tune(model, batches, dtype)
    report, recipe = result.report, result.recipe
    assert result.passed and report.confirmed and recipe is not None, report.reason
    assert recipe.fp32_outputs == report.fp32_outputs == ("step.halt",)
    assert "step" not in report.keep_fp32
    share = report.fp32_flops_share
    assert share is not None and share <= 0.01
    assert any(e.fp32_outputs == ("step.halt",) for e in report.variants[0].evaluations)
    buffer = io.StringIO()
    print_tune(report, Console(file=buffer, width=120, color_system=None))
    assert "fp32 hand-off: step.halt hands its outputs on in fp32" in buffer.getvalue()


def test_tune_says_when_rounding_the_inputs_alone_breaks_the_tolerance() -> None:
    model, batches = HELDOUT["geo-coordinates"].build()
    result = tune(model, batches, "bf16")
    assert any(n.startswith("input rounding alone breaks") for n in result.report.notes)
    control, cbatches = HELDOUT[CONTROL].build()
    plain = tune(control, cbatches, "bf16")
    assert not any("input rounding" in n for n in plain.report.notes)


# -- scaled half GEMM islands ---------------------------------------------------------------
def test_tune_keeps_the_gram_matmul_in_half_as_a_scaled_island() -> None:
    """The fix used to be an fp32 matmul: 22.9% of the model's FLOPs in fp32."""
    model, batches = HELDOUT["gram-overflow"].build()
    result = tune(model, batches[:1], "fp16")
    report = result.report
    assert result.passed and result.recipe is not None, report.reason
    assert [(r.module, r.op, r.kind) for r in report.op_islands] == [("gram", "matmul", "scaled")]
    assert [r.site for r in result.recipe.op_islands] == [r.site for r in report.op_islands]
    assert [r.kind for r in result.recipe.op_islands] == ["scaled"]
    assert report.fp32_flops_share == 0.0
    tried = [e.op_islands for e in report.variants[0].evaluations if e.op_islands]
    assert [r.kind for r in tried[0]] == ["fp32"] and [r.kind for r in tried[-1]] == ["scaled"]
    assert compare(model, result.model, batches).passed
    buffer = io.StringIO()
    print_tune(report, Console(file=buffer, width=200, color_system=None))
    text = buffer.getvalue()
    assert "op island: gram: matmul at heldout_sums.py" in text and "(scaled half)" in text
    assert "1 op islands (1 of them scaled half GEMMs), 0.00% of parameters, 0.00% of FLOPs" in text


class _Rows(nn.Module):
    """One linear layer whose output overflows fp16 on inputs near 3e4; its first row and
    the rest are two outputs, so the rest is judged on its own scale."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(256, 32, bias=False)
        with torch.no_grad():
            self.proj.weight.mul_(16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.proj(x)
        return y[:1], y[1:]


def test_a_scaled_island_that_fails_confirmation_is_computed_in_fp32() -> None:
    """Calibration: every row near 3e4, so one per-tensor scale suits them all. The
    confirmation batch's other rows are near 2e-4: under the first row's scale they fall
    among fp16's subnormals, which the fp32 island keeps."""
    g = torch.Generator().manual_seed(1)
    cal = (3e4 * torch.rand(4, 256, generator=g),)
    held = 3e4 * torch.rand(4, 256, generator=g)
    held[1:] *= 2e-4 / 3e4
    model = _Rows().eval()
    result = tune(model, [cal, (held,)], "fp16")
    report = result.report
    assert result.passed and report.confirmed is True, report.reason
    assert [r.kind for r in report.variants[0].op_islands] == ["scaled"]  # what calibration chose
    assert [(r.module, r.op, r.kind) for r in report.op_islands] == [("proj", "linear", "fp32")]
    assert result.recipe is not None
    assert [r.kind for r in result.recipe.op_islands] == ["fp32"]
    assert report.fp32_flops_share == 1.0  # the linear is all of the model's FLOPs
    assert any("met the tolerance on the calibration batches but not" in n for n in report.notes)
    assert compare(model, result.model, [cal, (held,)]).passed
    scaled = convert(model, result.recipe.replace(op_islands=report.variants[0].op_islands))
    assert not compare(model, scaled, [(held,)]).passed  # the scaled island alone fails there


class _FailingCounter(FlopCounterMode):
    """torch's FLOP counter as it fails on a hybrid attention/SSM decoder's causal-conv
    kernel: the model runs, the counting does not."""

    def _count_flops(self, *args: object) -> None:
        raise RuntimeError("Expected gradient function to be set")


@pytest.mark.parametrize("model_name", ["needs-islands", "passes-as-is"])
def test_a_failing_flop_counter_leaves_the_verdict_and_says_n_a(
    model_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if model_name == "needs-islands":
        model: nn.Module = TwoPaths().eval()
        batches = [(torch.randn(2, 64, 16, generator=g),) for _ in range(2)]
    else:
        model = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 4)).eval()
        batches = [(torch.randn(4, 16, generator=g),) for _ in range(2)]
    monkeypatch.setattr("halfprec.flops.FlopCounterMode", _FailingCounter)
    result = tune(model, batches, "fp16")
    assert result.passed
    assert result.report.fp32_flops_share is None
    assert "Expected gradient function to be set" in result.report.flops_unavailable
    out = io.StringIO()
    print_tune(result.report, Console(file=out, width=300))
    assert "FLOPs n/a (torch's FLOP counter failed on" in out.getvalue()
    assert result.report.to_json()["flops_unavailable"] == result.report.flops_unavailable


@pytest.mark.slow
def test_a_hybrid_attention_ssm_decoder_tunes_with_its_flops_n_a(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # torch's FLOP counter asserts on Bamba's Mamba layers under no_grad ("Expected
    # gradient function to be set"): the verdict runs all the same
    pytest.importorskip("transformers")
    from halfprec.io.specs import load_model
    from testbed.hf_processors import save

    loaded = load_model(str(save("bamba", tmp_path / "bamba")))
    result = tune(loaded.model, loaded.example_inputs, "fp16")
    assert result.passed, result.report.variants[0].note
    assert "FLOP counter failed on BambaForCausalLM" in result.report.flops_unavailable
