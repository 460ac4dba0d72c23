"""ONNX translations torch.onnx lacks (halfprec.export.onnx_ops)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import halfprec
from halfprec.export.onnx_ops import translations
from support.export_models import ChecksAllTrue


class _AllPositive(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._is_all_true(x > 0)


@pytest.mark.parametrize("opset", [17, 18, 20])
def test_is_all_true_is_all_of_the_condition(tmp_path: Path, opset: int) -> None:
    program = torch.export.export(_AllPositive(), (torch.ones(2, 3),))
    with contextlib.redirect_stdout(io.StringIO()):
        onnx_program = torch.onnx.export(
            program, opset_version=opset, custom_translation_table=translations(opset), dynamo=True
        )
    assert onnx_program is not None
    onnx_program.save(str(tmp_path / "all.onnx"))
    session = ort.InferenceSession(str(tmp_path / "all.onnx"), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    for x in (np.ones((2, 3)), -np.ones((2, 3)), np.array([[1.0, 2, -3], [4, 5, 6]])):
        (got,) = session.run(None, {name: x.astype(np.float32)})
        assert bool(got) == bool((x > 0).all()), x


def test_a_model_that_checks_a_tensor_condition_exports_to_onnx(tmp_path: Path) -> None:
    result = halfprec.export(ChecksAllTrue().eval(), [torch.randn(4, 8)], tmp_path / "c.onnx")
    assert result.passed and (tmp_path / "c.onnx").exists()
