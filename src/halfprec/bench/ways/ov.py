"""``openvino``: the fp32 model compiled by OpenVINO; the dtype is its inference-precision
hint."""

from __future__ import annotations

from halfprec.bench.ways.runtime import RuntimeWay
from halfprec.runtimes import runtime_dtypes


class OpenVINO(RuntimeWay):
    name = "openvino"
    runs_in = "openvino"
    summary = "compiled by OpenVINO on CPU; the dtype is its inference-precision hint"
    dtypes = runtime_dtypes("openvino")
