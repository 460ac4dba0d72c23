"""ONNX translations of aten operators that torch.onnx lacks, passed to its exporter.

``aten._is_all_true`` is what ``torch._check_tensor_all(cond)`` traces to: a model's runtime
check on a boolean tensor (transformers' ``torch_compilable_check`` while tracing, e.g.
LLaVA's "image features and image tokens match"). torch.onnx has no translation for it, so
a model that checks its inputs this way cannot be written. It is ``all(cond)``: here a
``ReduceMin`` over the condition as integers, true for an empty tensor as ``all`` is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_INT32 = 6  # onnx.TensorProto.INT32
_BOOL = 9  # onnx.TensorProto.BOOL


def translations(opset: int) -> dict[Any, Callable[..., Any]]:
    """``custom_translation_table`` entries for ``torch.onnx.export`` at ``opset``."""
    import onnxscript

    op = getattr(onnxscript, f"opset{opset}", None)
    if op is None:  # an opset this onnxscript has no module for: torch.onnx's own table
        return {}

    def is_all_true(cond: Any) -> Any:
        return op.Cast(op.ReduceMin(op.Cast(cond, to=_INT32), keepdims=0), to=_BOOL)

    return {torch.ops.aten._is_all_true.default: is_all_true}
