"""Every fp32-vs-other comparison goes through :func:`halfprec.errorstats.aligned`: on one
device, never across two, never on the meta device.

:class:`support.devices.Remote` stands in for a CUDA reference: like one, it raises when an
op meets a CPU tensor, which is what an ONNX or TorchScript file run on the CPU returns."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import halfprec
from halfprec.compare import compare_outputs
from halfprec.errorstats import ErrorStats, aligned
from halfprec.export import load_artifact, verify_artifact
from support.devices import Remote
from support.export_models import example_inputs, tiny


def test_the_stand_in_refuses_to_meet_a_cpu_tensor_as_cuda_does() -> None:
    with pytest.raises(RuntimeError, match="same device"):
        Remote(torch.ones(3)) - torch.ones(3)


def test_a_pair_on_two_devices_is_compared_on_the_cpu() -> None:
    ref, cand = aligned(Remote(torch.tensor([1.0, 2.0])), torch.tensor([1.0, 2.5]))
    assert ref.device.type == cand.device.type == "cpu"
    assert torch.equal(ref, torch.tensor([1.0, 2.0]))


def test_error_statistics_of_a_gpu_reference_against_cpu_outputs() -> None:
    stats = ErrorStats()
    ref = {"out": Remote(torch.tensor([1.0, 2.0, 4.0]))}
    stats.add(ref, {"out": torch.tensor([1.0, 2.0, 4.5], dtype=torch.float16)})
    assert stats.max_abs == 0.5 and stats.compared == 3


def test_logits_ids_and_values_of_a_gpu_reference_compare_with_cpu_outputs() -> None:
    logits = torch.tensor([[0.1, 2.0, 0.3], [1.0, 0.0, -1.0]])
    ref = [{"logits": Remote(logits), "ids": Remote(torch.tensor([1, 0]))}]
    cand = [{"logits": logits.half(), "ids": torch.tensor([1, 0])}]
    cmp = compare_outputs(ref, cand, dtype=torch.float16)
    assert cmp.passed, cmp.reason
    assert cmp["logits"].argmax_agreement == 1.0 and cmp.compared == 8


@pytest.mark.parametrize("side", ["reference", "compared"])
def test_a_meta_tensor_is_refused_with_a_reason_not_passed(side: str) -> None:
    real, meta = torch.ones(2, 3), torch.ones(2, 3, device="meta")
    pair = (meta, real) if side == "reference" else (real, meta)
    with pytest.raises(ValueError, match=f"the {side} tensor \\(2, 3\\) is on the meta device"):
        aligned(*pair)
    with pytest.raises(ValueError, match="meta device"):
        compare_outputs([pair[0]], [pair[1]], dtype=torch.float16)


def test_a_cpu_artifact_is_checked_against_a_gpu_reference(tmp_path: Path) -> None:
    """export's check on a GPU host: the reference on the GPU, the TorchScript file run on
    the CPU (it loads with map_location="cpu")."""
    model, batches = tiny(), example_inputs()
    result = halfprec.export(model, batches, tmp_path / "m.ts", "fp16")
    artifact = load_artifact(tmp_path / "m.ts")
    with torch.no_grad():
        ref = [{k: Remote(v) for k, v in model(b).items()} for b in batches]
    check = verify_artifact(artifact, batches, ref)
    assert check.comparison.passed, check.comparison.reason
    assert check.comparison.compared == result.comparison.compared
