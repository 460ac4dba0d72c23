"""Reshapes of strided views, made contiguous before torch.onnx translates them.

torch.onnx's decompositions turn ``aten.reshape`` into ``aten.view``, which refuses an input
whose strides no view can express: a transposed attention output reshaped without
``.contiguous()`` (T5's cross-attention in transformers 5) fails with "Cannot view a tensor
with shape ... and strides ...", whether the shapes are dynamic or static. ONNX tensors have
no strides, so a contiguous copy before each reshape changes no value in the file.
"""

from __future__ import annotations

import torch

_RESHAPE = torch.ops.aten.reshape.default
_CLONE = torch.ops.aten.clone.default


def is_strided_view_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a view that the strides of
    its input cannot express."""
    seen: BaseException | None = exc
    while seen is not None:
        if "Cannot view a tensor with shape" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def contiguous_reshapes(program: torch.export.ExportedProgram) -> int:
    """Give every ``aten.reshape`` in ``program``'s graph a contiguous copy of its input,
    in place; returns how many."""
    graph = program.graph_module.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not _RESHAPE:
            continue
        source = node.args[0]
        with graph.inserting_before(node):
            copy = graph.call_function(
                _CLONE, (source,), {"memory_format": torch.contiguous_format}
            )
        value = source.meta.get("val")
        if isinstance(value, torch.Tensor):
            copy.meta["val"] = value.clone(memory_format=torch.contiguous_format)
        node.replace_input_with(source, copy)
        count += 1
    program.graph_module.recompile()
    return count
