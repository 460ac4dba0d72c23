"""The onnxruntime target: halfprec's ONNX exporter on the fp32 model (dynamic batch), run
by onnxruntime's CPU execution provider.

fp32 only: the CPU provider has no fp16 or bf16 kernels for most operators on x86 and
casts an fp16 graph back to fp32 around them (:func:`halfprec.export.onnx.inspect_casts`),
so a half file would be measured as something it is not.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from halfprec._version import __version__
from halfprec.batch import Batch
from halfprec.export.api import write_artifact
from halfprec.export.config import ExportConfig
from halfprec.export.hf import without_cache
from halfprec.export.info import ArtifactInfo
from halfprec.export.onnx import PROVIDER, import_onnx, import_onnxruntime
from halfprec.runtimes.module import FlatIO, RuntimeModule

__all__ = ["build"]


def build(model: nn.Module, batch: Batch, threads: int) -> RuntimeModule:
    """Export ``model`` (fp32, eval mode) to ONNX traced on ``batch`` and open it with
    ``threads`` intra-op threads. The file lives in a temporary folder that goes with the
    module."""
    import_onnx()
    ort = import_onnxruntime()
    model, _ = without_cache(model)  # a cache object is no tensor a graph returns
    io = FlatIO.of(model, batch)
    info = ArtifactInfo(
        format="onnx",
        dtype="fp32",
        io_dtype="fp32",
        model=type(model).__name__,
        params=io.params,
        inputs=io.inputs,
        outputs=io.outputs,
        halfprec=__version__,
    )
    folder = tempfile.TemporaryDirectory(prefix="halfprec-ort-")
    path = Path(folder.name) / "model.onnx"
    write_artifact(ExportConfig(format="onnx"), model, [io.named], path, info)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=[PROVIDER])
    names = [o.name for o in session.get_outputs()]
    graph_inputs = {i.name for i in session.get_inputs()}  # the exporter drops unused inputs
    feeds_at = [(n, i) for i, n in enumerate(io.inputs) if n in graph_inputs]

    def run(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        feeds = {n: tensors[i].detach().cpu().numpy() for n, i in feeds_at}
        return [torch.from_numpy(r) for r in session.run(names, feeds)]

    def save(target: Path) -> Path:
        if target.suffix != ".onnx":
            raise ValueError(f"the onnxruntime graph is saved as NAME.onnx, got {target.name!r}")
        shutil.copyfile(path, target)
        return target

    return RuntimeModule("onnxruntime", "fp32", run, io, save, keep=(session, folder))
