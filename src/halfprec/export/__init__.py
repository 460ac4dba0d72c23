"""Deploy the half model: torch.export (``.pt2``), TorchScript, and ONNX checked with
onnxruntime. See :func:`export` and :func:`load_artifact`.

ONNX needs the ``onnx`` extra (``pip install 'halfprec[onnx]'``), imported only when used.
"""

from __future__ import annotations

from halfprec.export.api import ExportResult, export
from halfprec.export.artifact import Artifact, Verification, load_artifact, verify_artifact
from halfprec.export.checking import ArtifactCheck, check_artifact
from halfprec.export.config import FORMATS, ExportError, ExportFormat, format_for_path
from halfprec.export.info import ArtifactInfo
from halfprec.export.onnx import OrtCasts, OrtLatency

__all__ = [
    "export",
    "ExportResult",
    "ExportError",
    "ExportFormat",
    "FORMATS",
    "format_for_path",
    "Artifact",
    "ArtifactInfo",
    "Verification",
    "load_artifact",
    "verify_artifact",
    "ArtifactCheck",
    "check_artifact",
    "OrtCasts",
    "OrtLatency",
]
