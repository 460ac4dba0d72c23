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
from halfprec.atomic import atomic_path
from halfprec.batch import Batch
from halfprec.export.api import write_artifact
from halfprec.export.config import ExportConfig
from halfprec.export.hf import without_cache
from halfprec.export.info import ArtifactInfo
from halfprec.export.onnx import OnnxSession, import_onnx, import_onnxruntime
from halfprec.runtimes.module import FlatIO, RuntimeModule


def build(model: nn.Module, batch: Batch, threads: int) -> RuntimeModule:
    """Export ``model`` (fp32, eval mode) to ONNX traced on ``batch`` and open it with
    ``threads`` intra-op threads (an :class:`~halfprec.export.onnx.OnnxSession`). The file
    lives in a temporary folder that goes with the module, or with the error."""
    import_onnx()  # a missing extra is named before the export, not after it
    import_onnxruntime()
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
    try:
        write_artifact(ExportConfig(format="onnx"), model, [io.named], path, info)
        session = OnnxSession(
            path,
            threads=threads,
            source=f"the ONNX export of {info.model}",
            fix="run this model with torch, or replace what onnxruntime refuses",
        )
    except BaseException:
        folder.cleanup()  # now, not when the traceback lets go of it
        raise

    def run(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        # by name: the feeds are the graph's inputs, which may be fewer than the model's
        return session.run_list(session.feeds(dict(zip(io.inputs, tensors, strict=True))))

    def save(target: Path) -> Path:
        if target.suffix != ".onnx":
            raise ValueError(f"the onnxruntime graph is saved as NAME.onnx, got {target.name!r}")
        with atomic_path(target) as tmp:  # never a partial file at ``target``
            shutil.copyfile(path, tmp)
        return target

    return RuntimeModule("onnxruntime", "fp32", run, io, save, keep=(session, folder))
