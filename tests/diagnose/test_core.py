"""diagnose: names the module that breaks in half, on real-world hazard patterns."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from halfprec import Recipe, convert, diagnose
from halfprec.diagnose import naive_half
from halfprec.errors import HalfprecError
from support.precision import SEEN, callers_fp32, spy
from testbed.hazards import HAZARDS


@pytest.mark.parametrize("name", list(HAZARDS))
def test_diagnose_names_the_culprit_of_every_hazard(name: str) -> None:
    hazard = HAZARDS[name]
    model, batches = hazard.build()
    diag = diagnose(model, batches, "fp16")
    assert diag.divergence is not None, f"{name}: no divergence found"
    assert diag.culprit == hazard.culprit
    assert diag.divergence.culprit_reason
    assert diag[hazard.culprit].problem(diag.threshold, diag.dtype) is not None


def test_fill_hazard_raises_in_fp16_but_not_in_bf16() -> None:
    model, batches = HAZARDS["fill-1e9"].build()
    fp16 = diagnose(model, batches, "fp16")
    core = fp16["layers.0.attn.core"]
    assert core.local_exception is not None and "overflow" in core.local_exception
    assert "raises" in core.flags
    assert not fp16.passed
    bf16 = diagnose(model, batches, "bf16")
    assert bf16.divergence is None
    assert bf16.passed


def test_shared_module_is_diagnosed_per_call() -> None:
    model, batches = HAZARDS["shared-loop"].build()
    diag = diagnose(model, batches, "fp16")
    norm = diag["norm"]
    assert norm.calls == 4 * len(batches)
    assert diag.divergence is not None
    assert diag.divergence.module == "norm"
    assert diag.divergence.call == 2  # the third step is the one that overflows
    assert norm.fp32_max_abs < 100 and norm.input_max_abs > 256  # x**2 > 65504


def test_overflow_reports_fp32_values_beyond_range() -> None:
    model, batches = HAZARDS["large-intermediate"].build()
    diag = diagnose(model, batches, "fp16")
    up = diag["ffn.0"]
    assert up.fp32_max_abs > 65504
    assert up.local.beyond_range > 0
    assert "beyond-range" in up.flags and "inf/nan" in up.flags
    assert "65504" in (diag.divergence.culprit_reason if diag.divergence else "")


def test_dtype_leaks_are_blamed_on_the_module_that_makes_fp32() -> None:
    model, batches = HAZARDS["tensor-no-dtype"].build()
    diag = diagnose(model, batches, "fp16")
    assert diag.divergence is not None
    assert diag.divergence.module == "mixer.proj"  # where it crashes ...
    assert diag.culprit == "mixer"  # ... and who made the fp32 tensor
    assert "mixer.proj" in (diag["mixer"].leak or "")


def test_converted_model_with_the_fix_does_not_diverge() -> None:
    model, batches = HAZARDS["rmsnorm-overflow"].build()
    half = convert(model, Recipe(dtype="fp16", keep_fp32=("norm",)))
    diag = diagnose(model, batches, half=half)
    assert diag.dtype == torch.float16
    assert diag.half_model == "converted"
    assert diag.divergence is None
    assert diag.passed


def test_healthy_model_has_small_nonzero_local_errors_in_execution_order() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
    x = torch.randn(5, 8)
    diag = diagnose(model, x, "fp16")
    assert diag.divergence is None and diag.passed
    assert [m.name for m in diag.modules] == ["", "0", "1", "2"]
    assert [m.index for m in diag.modules] == [0, 1, 2, 3]
    linear = diag["0"]
    assert 0 < linear.local_error < 1e-2
    assert linear.accumulated_error is not None and linear.accumulated_error < 1e-2


def test_diagnose_leaves_the_model_unchanged() -> None:
    model, batches = HAZARDS["exp-softmax"].build()
    with torch.inference_mode():
        before = model(**batches[0])
    diagnose(model, batches, "fp16")
    with torch.inference_mode():
        after = model(**batches[0])
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert torch.equal(before, after)


def test_half_model_with_other_module_names_is_refused() -> None:
    model, batches = HAZARDS["exp-softmax"].build()
    other = naive_half(nn.Sequential(nn.Linear(2, 2)), torch.float16)
    with pytest.raises(HalfprecError, match="has no module"):
        diagnose(model, batches, half=other)


def test_diagnose_with_a_recipe_converts_with_its_islands() -> None:
    """A recipe's islands are part of what is diagnosed: with softmax kept fp32 (and nothing
    else: no op policy, no norm islands), the hazard is gone; the dtype alone is the naive
    copy, in which it breaks."""
    model, batches = HAZARDS["exp-softmax"].build()
    bare = Recipe(dtype="fp16", norm_islands=False, fp32_ops=(), fp32_inputs=False)
    without = diagnose(model, batches, bare)
    assert without.half_model == "converted" and without.culprit == "softmax"
    kept = diagnose(model, batches, bare.replace(keep_fp32=("softmax",)))
    assert kept.half_model == "converted"
    assert kept.passed and kept.divergence is None
    naive = diagnose(model, batches, Recipe(dtype="fp16"))
    assert naive.half_model == "naive" and naive.culprit == "softmax"


class _SpyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(spy(x))


def test_every_fp32_reference_is_ieee_under_the_callers_reduced_precision() -> None:
    """The whole-model pass AND each op's fp32 recomputation run in IEEE fp32 when the
    caller set oneDNN's matmuls to bf16 (the CPU's TF32), which is restored afterwards."""
    SEEN.clear()
    with callers_fp32(mkldnn_matmul="bf16", cuda_matmul="tf32"):
        diagnose(_SpyNet(), [torch.randn(4, 8)], "bf16")
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    fp32_calls = [seen for seen in SEEN if seen[0] == torch.float32]
    per_op = [seen for seen in SEEN if seen[0] == torch.bfloat16]
    assert len(fp32_calls) >= 2 and per_op, SEEN  # the model's pass and the op's reference
    assert all(seen[1:] == ("ieee", "ieee") for seen in fp32_calls), SEEN
