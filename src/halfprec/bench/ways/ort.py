"""``onnxruntime``: the fp32 model exported to ONNX and run by onnxruntime's CPU provider."""

from __future__ import annotations

from halfprec.bench.ways.runtime import RuntimeWay
from halfprec.runtimes import runtime_dtypes


class OnnxRuntime(RuntimeWay):
    name = "onnxruntime"
    runs_in = "onnxruntime"
    summary = "exported to ONNX and run by onnxruntime's CPU provider (fp32 only)"
    dtypes = runtime_dtypes("onnxruntime")
