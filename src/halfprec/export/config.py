"""Export options, the formats halfprec writes, and the error export raises."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..dtypes import DTypeLike
from ..errors import HalfprecError

__all__ = [
    "ExportConfig",
    "ExportError",
    "ExportFormat",
    "FORMATS",
    "SUFFIXES",
    "format_for_path",
    "DEFAULT_OPSET",
]

ExportFormat = Literal["exported-program", "torchscript", "onnx"]

FORMATS: tuple[ExportFormat, ...] = ("exported-program", "torchscript", "onnx")

# file suffix -> format; the first suffix of each format is the one halfprec suggests
SUFFIXES: dict[str, ExportFormat] = {
    ".pt2": "exported-program",
    ".ts": "torchscript",
    ".pt": "torchscript",
    ".onnx": "onnx",
}

DEFAULT_OPSET = 18


class ExportError(HalfprecError, RuntimeError):
    """The model cannot be exported as asked (unsupported op, shapes, format)."""


def format_for_path(path: str | Path) -> ExportFormat:
    """The format a file name implies (``.pt2``, ``.ts``/``.pt``, ``.onnx``)."""
    suffix = Path(path).suffix.lower()
    fmt = SUFFIXES.get(suffix)
    if fmt is None:
        raise ExportError(
            f"cannot tell the export format from {Path(path).name!r}; name the file *.pt2 "
            "(torch.export), *.ts or *.pt (TorchScript) or *.onnx, or pass the format"
        )
    return fmt


@dataclass(frozen=True)
class ExportConfig:
    """Options of :func:`halfprec.export`.

    ``dtype``: ``"fp16"``, ``"bf16"``, ``"auto"`` or a ``torch.dtype``; ONNX takes fp16 only
    (``"auto"`` means fp16 there). ``dynamic``: export with symbolic batch size and with
    symbolic sizes for every dimension that differs between the example batches
    (torch.export and ONNX; a TorchScript trace records no shape intent).
    ``half_io``: the artifact takes and returns half tensors instead of fp32 ones.
    ``opset``: the ONNX opset (17 or newer).
    """

    format: ExportFormat = "exported-program"
    dtype: DTypeLike = "auto"
    dynamic: bool = True
    half_io: bool = False
    opset: int = DEFAULT_OPSET

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.opset < 17:
            raise ValueError(f"opset must be 17 or newer, got {self.opset}")
