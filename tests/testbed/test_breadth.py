"""A fast subset of the breadth benchmark (benchmarks/breadth.py): on real transformers
architectures and their stressed twins, halfprec is never worse than ``.to(dtype)``, and
tune makes fp16 pass wherever the fp32 reference is finite."""

from __future__ import annotations

import pytest
import torch

from testbed.breadth import Case, markdown, run_arch, violations
from testbed.breadth_models import ARCHS, KINDS, arch, build, stressed

pytest.importorskip("transformers")

SUBSET = ("bert", "llama", "levit", "regnet", "wav2vec2")  # text, causal, vision, audio
FP16, BF16 = torch.float16, torch.bfloat16


@pytest.fixture(scope="module")
def cases() -> dict[str, list[Case]]:
    """fp16 on both twins (with tune), bf16 (emulated, slow here) on the stressed one."""
    out = {}
    for name in SUBSET:
        a = arch(name)
        plain = run_arch(a, [FP16], twins=[False], max_evaluations=12)
        out[name] = plain + run_arch(a, [FP16, BF16], twins=[True], max_evaluations=12)
    return out


@pytest.mark.parametrize("name", SUBSET)
def test_never_worse_than_naive_and_tune_fixes_fp16(
    cases: dict[str, list[Case]], name: str
) -> None:
    mine = cases[name]
    assert violations(mine) == []
    finite = [c for c in mine if c.reference_finite]
    assert finite and all(c.convert.status != "-" for c in finite)
    assert all(c.autocast.status != "-" for c in finite)
    assert all(c.tune.passed for c in finite if c.dtype == FP16)


def test_the_subset_holds_the_cases_where_naive_breaks(cases: dict[str, list[Case]]) -> None:
    """The rules are not vacuous here: naive crashes on LeViT's stale fp32 cache and
    overflows on stressed RegNet (its outputs exceed fp16's range), where convert runs and
    tune passes."""
    levit = cases["levit"][0]
    assert levit.naive.status == "raised" and "dtype" in levit.naive.reason
    assert levit.convert.passed
    regnet = next(c for c in cases["regnet"] if c.stressed and c.dtype == FP16)
    assert regnet.reference_finite and regnet.naive.status == "fail"
    assert "inf/NaN" in regnet.naive.reason
    # tune keeps the one stage whose values leave fp16's range, not the whole encoder (94%)
    assert regnet.tune.passed and regnet.tune_param_share is not None
    assert regnet.tune_param_share < 0.75
    table = markdown([levit, regnet])
    assert "| levit | vision | **raises** | pass | pass | pass (" in table
    assert "| fp16 | 2 | 0 | 0/2 | 1/2 | 1/2 | 2/2 | 0 | 0 |" in table


def test_the_autocast_column_runs_the_fp32_model_under_autocast(
    cases: dict[str, list[Case]],
) -> None:
    """Autocast keeps LeViT's cache fp32 and so runs it, but computes stressed RegNet's
    convolutions in fp16, where they overflow (in fp32 they would pass)."""
    levit = cases["levit"][0]
    regnet = next(c for c in cases["regnet"] if c.stressed and c.dtype == FP16)
    assert levit.autocast.passed
    assert regnet.autocast.status == "fail" and "inf/NaN" in regnet.autocast.reason
    table = markdown([levit, regnet])
    assert "| model | kind | fp16 naive | fp16 autocast | fp16 convert | fp16 tune" in table
    assert "- regnet (stressed) fp16, autocast fail: last_hidden_state:" in table


def test_architecture_list_covers_text_vision_and_audio() -> None:
    assert len(ARCHS) >= 30
    assert {a.kind for a in ARCHS} == set(KINDS)
    assert len({a.name for a in ARCHS}) == len(ARCHS)
    with pytest.raises(ValueError, match="no architecture 'nope'"):
        arch("nope")


def test_stressed_twin_scales_projections_and_leaves_the_model_alone() -> None:
    model = build(arch("bert"))
    before = model.encoder.layer[0].intermediate.dense.weight.clone()
    twin = stressed(model)
    assert torch.equal(model.encoder.layer[0].intermediate.dense.weight, before)
    torch.testing.assert_close(twin.encoder.layer[0].intermediate.dense.weight, 8 * before)
    norm = twin.encoder.layer[0].output.LayerNorm
    assert 0.1 < float(norm.weight.std()) < 1.0 and abs(float(norm.weight.mean()) - 1) < 0.5
    bias = twin.encoder.layer[0].intermediate.dense.bias
    assert 0.1 < float(bias.std()) < 0.4
