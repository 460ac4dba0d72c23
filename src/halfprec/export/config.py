"""Export options, the formats halfprec writes, and the error export raises."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from halfprec.dtypes import DTypeLike, is_auto, parse_dtype
from halfprec.errors import DTypeError, HalfprecError

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


class RuntimeFailure(RuntimeError):
    """The runtime that runs a written file (onnxruntime) failed inside one of its kernels."""


def format_for_path(path: str | Path) -> ExportFormat:
    """The format a file name implies (``.pt2``, ``.ts``/``.pt``, ``.onnx``). The file's
    suffix is the one way to name it: ``export --format`` must fit it too."""
    suffix = Path(path).suffix.lower()
    fmt = SUFFIXES.get(suffix)
    if fmt is None:
        raise ExportError(
            f"{path}: cannot tell the export format from the suffix {suffix or '(none)'!r}; "
            "name the file *.pt2 (torch.export), *.ts or *.pt (TorchScript) or *.onnx (ONNX)"
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
    ``kv_cache``: a decoder-only Hugging Face language model is exported with its KV cache
    as tensor inputs and outputs (``past_key_values`` in, ``present_key_values`` out);
    needs dynamic shapes and ``.pt2`` or ONNX.
    """

    format: ExportFormat = "exported-program"
    dtype: DTypeLike = "auto"
    dynamic: bool = True
    half_io: bool = False
    opset: int = DEFAULT_OPSET
    kv_cache: bool = False

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.opset < 17:
            raise ValueError(f"opset must be 17 or newer, got {self.opset}")
        if self.format == "onnx" and not is_auto(self.dtype):
            check_onnx_dtype(parse_dtype(self.dtype))
        if self.kv_cache and self.format == "torchscript":
            raise ExportError(
                "--kv-cache exports .pt2 or ONNX (a TorchScript trace cannot take a cache "
                "that grows); name the file *.pt2 or *.onnx"
            )
        if self.kv_cache and not self.dynamic:
            raise ExportError(
                "--kv-cache needs dynamic shapes (the cache grows by one position per "
                "token); drop --static"
            )

    @classmethod
    def for_path(
        cls,
        path: str | Path,
        format: ExportFormat | None = None,
        *,
        dtype: DTypeLike = "auto",
        dynamic: bool = True,
        half_io: bool = False,
        opset: int | None = None,
        kv_cache: bool = False,
    ) -> ExportConfig:
        """The config for writing ``path``; its suffix must fit ``format`` (default: implied)."""
        fmt = format if format is not None else format_for_path(path)
        if SUFFIXES.get(Path(path).suffix.lower()) != fmt:
            wanted = " or ".join(f"*{s}" for s, f in SUFFIXES.items() if f == fmt)
            raise ExportError(
                f"{Path(path).name!r} does not fit format {fmt}; name the file {wanted} so "
                "that check --artifact can tell the format"
            )
        return cls(
            format=fmt,
            dtype=dtype,
            dynamic=dynamic,
            half_io=half_io,
            opset=opset if opset is not None else DEFAULT_OPSET,
            kv_cache=kv_cache,
        )


def check_onnx_dtype(dtype: torch.dtype) -> None:
    """ONNX export takes fp16 only; bf16 would not run on onnxruntime's CPU provider."""
    if dtype == torch.bfloat16:
        raise DTypeError(
            "bf16 ONNX is not supported: onnxruntime's CPU provider has no bf16 Gemm/MatMul "
            "kernels and refuses such files; export ONNX with --dtype fp16, or bf16 to a .pt2 "
            "file (-o NAME.pt2)"
        )
