"""tune: finds small fp32 islands that make every hazard model meet the tolerance."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from halfprec import ConvertConfig, Policy, convert, tune
from halfprec.compare import compare
from halfprec.errors import DTypeError, HalfprecError
from halfprec.testing.hazards import (
    HAZARDS,
    ExpSoftmax,
    dropout_model,
    dropout_model_example_inputs,
)
from halfprec.tune import ToleranceUnreachableError, TuneConfig

LOCAL = [
    "fill-1e9",
    "rmsnorm-overflow",
    "eps-1e-12",
    "exp-softmax",
    "int-dict-positions",
    "shared-loop",
]


@pytest.mark.parametrize("name", list(HAZARDS))
def test_tune_makes_every_hazard_finite_and_within_tolerance(name: str) -> None:
    hazard = HAZARDS[name]
    model, batches = hazard.build()
    result = tune(model, batches, "fp16")
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
    result = tune(model, batches, "fp16", progress=seen.append)
    assert result.passed
    fixed = set(result.keep_fp32) | {o.module for o in result.report.op_islands}
    assert fixed == {"1", "4"}
    assert len(seen) == len(result.report.variants[0].evaluations)
    assert seen[0].startswith("fp16: try 1, 0 islands, fail")
    diag = result.report.variants[0].diagnosis
    assert diag is not None and diag.culprit == "1"


def test_policy_file_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, batches = HAZARDS["rmsnorm-overflow"].build()
    result = tune(model, batches, "fp16")
    path = tmp_path / "policy.json"
    result.save_policy(str(path))
    policy = Policy.load(path)
    assert policy.dtype == torch.float16
    assert policy.keep_fp32 == ("norm",) or {o.module for o in policy.op_islands} == {"norm"}
    assert policy.info["passes"] == result.report.passes
    deployed = convert(model, ConvertConfig(policy=path))
    assert compare(model, deployed, batches).passed
    assert not compare(model, convert(model, "fp16"), batches).passed


def test_dropout_in_train_mode_is_reported_plainly() -> None:
    model = dropout_model()
    with pytest.raises(ToleranceUnreachableError, match="train mode.*model.eval"):
        tune(model, dropout_model_example_inputs(), "fp16")


def test_budget_too_small_returns_no_policy() -> None:
    model, batches = HAZARDS["exp-softmax"].build()
    result = tune(model, batches, "fp16", max_evaluations=1)
    assert not result.passed and result.model is None
    assert "max_evaluations=1" in result.report.variants[0].note
    with pytest.raises(HalfprecError, match="no policy"):
        result.policy  # noqa: B018


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


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="max_evaluations"):
        TuneConfig(max_evaluations=0)
    with pytest.raises(DTypeError, match="not a half dtype"):
        ConvertConfig(dtype="fp32")
