"""The runtime table: which precisions each runtime offers and why one cannot run here."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from halfprec.runtimes import RUNTIMES, build_runtime, runtime_dtypes, unavailable


def test_the_table_offers_onnxruntime_in_fp32_only() -> None:
    assert RUNTIMES == ("openvino", "onnxruntime")
    assert runtime_dtypes("onnxruntime") == (torch.float32,)
    assert torch.bfloat16 in runtime_dtypes("openvino")
    with pytest.raises(ValueError, match="unknown runtime 'tensorrt'; use one of: openvino, onnx"):
        runtime_dtypes("tensorrt")
    with pytest.raises(ValueError, match="onnxruntime runs fp32"):
        build_runtime(nn.Linear(2, 2), "onnxruntime", torch.bfloat16, torch.randn(1, 2))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_model_off_the_cpu_is_a_note(runtime: str) -> None:
    assert unavailable(runtime, torch.float32, "cuda:0") == (
        f"{runtime} targets run on the CPU; the model is on cuda:0"
    )


@pytest.mark.parametrize(("runtime", "extra"), [("openvino", "openvino"), ("onnxruntime", "onnx")])
def test_a_missing_package_is_a_one_line_note_naming_the_extra(
    runtime: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, runtime, None)  # what an uninstalled package looks like
    note = unavailable(runtime, torch.float32, "cpu")
    assert note == (
        f"{runtime}-fp32 needs {runtime}, not installed; install it with: "
        f"pip install 'halfprec[{extra}]'"
    )


def test_openvino_half_is_offered_only_where_its_cpu_plugin_computes_it() -> None:
    ov = pytest.importorskip("openvino")
    caps = list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    assert unavailable("openvino", torch.float32, "cpu") is None
    note = unavailable("openvino", torch.bfloat16, "cpu")
    if "BF16" in caps:  # an AVX512-BF16 / AMX CPU: timed and checked like fp32
        assert note is None
    else:  # the hint would silently run f32: a duplicate of openvino-fp32, not timed
        assert note is not None and "has no bf16 here" in note and "would run f32" in note
        from halfprec.runtimes import ov as ov_target

        forced = ov_target.build(nn.Linear(4, 2).eval(), torch.randn(3, 4), torch.bfloat16, 1)
        assert forced.precision == "f32"  # what the note says: OpenVINO ran f32 for the hint
