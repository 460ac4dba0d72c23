"""``halfprec.export``: convert, export, reload the file, and check it against fp32."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from halfprec._version import __version__
from halfprec.atomic import atomic_path
from halfprec.batch import as_batches, call
from halfprec.compare import Comparison, Tolerance, run_reference
from halfprec.convert.core import (
    ConversionReport,
    Recipe,
    RecipeLike,
    conversion_report,
    convert,
)
from halfprec.dtypes import dtype_name, is_auto, parse_dtype
from halfprec.errorstats import ErrorStats
from halfprec.export.artifact import Verification, load_artifact, verify_artifact
from halfprec.export.capture import capture_fixing, dynamic_shapes, forward_params, named_inputs
from halfprec.export.config import ExportConfig, ExportError, ExportFormat, check_onnx_dtype
from halfprec.export.hf import (
    CACHE_NOTE,
    CLAMP_NOTE,
    shared_copy,
    static_fp16_clamps,
    without_cache,
)
from halfprec.export.info import ArtifactInfo
from halfprec.export.kv_cache import KV_CACHE_NOTE, cache_reference
from halfprec.export.moe import DENSE_EXPERTS_NOTE, dense_experts
from halfprec.export.onnx import (
    OrtCasts,
    OrtLatency,
    inspect_casts,
    ort_latency,
    provider_note,
    write_onnx,
)
from halfprec.export.seq2seq import (
    SEQ2SEQ_NOTE,
    Seq2SeqReference,
    encoder_path,
    is_encoder_decoder,
)
from halfprec.modules import evaluating, first_line, model_device
from halfprec.tree import flatten, map_tensors

__all__ = ["ExportResult", "export", "write_artifact", "fp32_info"]

T = TypeVar("T")


@dataclass
class ExportResult:
    """The written artifact and how it compares with fp32 and with the in-Python half model.

    ``python_max_abs``: the largest difference between the artifact's outputs and the
    converted model's outputs in this process (0.0 means identical).
    ``companions``: the other files written with this one, each checked on its own (an
    encoder-decoder with ``kv_cache=True``: the encoder file); ``passed`` covers them too.
    """

    path: Path
    info: ArtifactInfo
    conversion: ConversionReport
    comparison: Comparison
    python_max_abs: float
    bytes_written: int
    checked_batches: int
    skipped_batches: int
    ort_casts: OrtCasts | None = None
    ort_latency: OrtLatency | None = None
    notes: tuple[str, ...] = ()
    companions: tuple[ExportResult, ...] = ()

    @property
    def passed(self) -> bool:
        return self.comparison.passed and all(c.passed for c in self.companions)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.info.format,
            "dtype": self.info.dtype,
            "io_dtype": self.info.io_dtype,
            "passed": self.passed,
            "bytes_written": self.bytes_written,
            "bytes_fp32_params": self.conversion.bytes_before,
            "islands": self.conversion.islands,
            "python_max_abs": self.python_max_abs,
            "checked_batches": self.checked_batches,
            "skipped_batches": self.skipped_batches,
            "comparison": self.comparison.to_json(),
            "ort_casts": self.ort_casts.to_json() if self.ort_casts else None,
            "ort_latency": self.ort_latency.to_json() if self.ort_latency else None,
            "notes": list(self.notes),
            "companions": [c.to_json() for c in self.companions],
        }


def _export_dtype(config: ExportConfig, recipe: Recipe, model: nn.Module) -> torch.dtype:
    if config.format == "onnx":
        dtype = torch.float16 if is_auto(config.dtype) else parse_dtype(config.dtype)
        check_onnx_dtype(dtype)
        return dtype
    return recipe.resolve(model_device(model)).dtype


def _max_abs(a: list[Any], b: list[Any]) -> float:
    """The largest difference between two runs' floating outputs, compared on one device
    (:func:`~halfprec.errorstats.aligned`); inf where their inf/NaN do not match."""
    stats = ErrorStats()
    for x, y in zip(a, b, strict=True):
        stats.add(x, y)
    return math.inf if stats.nonfinite else stats.max_abs


def exportable(model: nn.Module, target: ExportConfig) -> list[str]:
    """Rewrite ``model`` (a converted or shared copy, never the caller's) as every file of
    ``target``'s format is rewritten: the one export path of the half file and its fp32
    timing twin. Returns the notes that say what changed."""
    notes = []
    clamps = static_fp16_clamps(model) if target.format != "torchscript" else 0
    if clamps:
        notes.append(CLAMP_NOTE.format(n=clamps))
    dense = dense_experts(model) if target.format == "onnx" else 0
    if dense:
        notes.append(DENSE_EXPERTS_NOTE.format(n=dense))
    return notes


def fp32_info(info: ArtifactInfo) -> ArtifactInfo:
    """Metadata for the fp32 baseline export of the same model (no islands, fp32 IO)."""
    return ArtifactInfo(**{**info.__dict__, "dtype": "fp32", "io_dtype": "fp32", "islands": {}})


def write_artifact(
    config: ExportConfig,
    model: nn.Module,
    named: list[dict[str, Any]],
    path: Path,
    info: ArtifactInfo,
    verify: Callable[[Path], T] | None = None,
    notes: list[str] | None = None,
) -> T | None:
    """Export ``model`` as ``config.format`` to ``path`` atomically (no file on failure).

    ``named``: the example batches as keyword inputs (:func:`named_inputs`); the first one
    is traced, all of them set the dynamic dimensions. No conversion happens here:
    :func:`export` does it. ``verify(temp_path)`` checks the written temp file before it
    replaces ``path``; when it raises, a previous file at ``path`` is left as it was.
    Returns what ``verify`` returns. Used directly for fp32 baselines. ``notes`` gets a
    line for each input dimension exported at its example size because the model's code
    fixes it (:func:`capture_fixing`).
    """
    shapes = dynamic_shapes(named) if config.dynamic else None
    with atomic_path(path) as tmp:
        if config.format == "torchscript":
            from halfprec.export.torchscript import write_torchscript

            write_torchscript(model, named[0], tmp, info)
        else:
            program, fixed = capture_fixing(model, named, shapes, onnx=config.format == "onnx")
            if notes is not None:
                notes += fixed
            if config.format == "onnx":
                write_onnx(program, tmp, info, config.opset)
            else:
                from halfprec.export.exported_program import write_exported_program

                write_exported_program(program, tmp, info)
        return verify(tmp) if verify is not None else None


def export(
    model: nn.Module,
    inputs: Any,
    path: str | os.PathLike[str],
    recipe: RecipeLike = None,
    *,
    format: ExportFormat | None = None,
    dynamic: bool = True,
    half_io: bool = False,
    opset: int | None = None,
    tolerance: Tolerance | None = None,
    runs: int = 0,
    name: str = "",
    kv_cache: bool = False,
) -> ExportResult:
    """Convert the fp32 ``model`` to half, export it to ``path``, and check the file.

    ``inputs``: example batches (one batch, or a list) used to trace and to check.
    ``format``: ``"exported-program"`` (.pt2), ``"torchscript"`` (.ts/.pt) or ``"onnx"``;
    default: from the suffix of ``path``. The file takes fp32 inputs and returns fp32
    outputs unless ``half_io=True``. It is reloaded and compared with ``model`` on every
    example batch (``result.comparison``) and with the in-Python half model
    (``result.python_max_abs``). For ONNX, ``result.ort_casts`` says where onnxruntime's
    CPU provider falls back to fp32, and ``runs > 0`` also times the fp32 and half ONNX
    exports with onnxruntime (``result.ort_latency``). ``recipe``: a :class:`Recipe`
    or a dtype, as in :func:`halfprec.convert` (ONNX: ``"auto"`` means fp16; ``half_io``
    decides ``cast_outputs``, and ONNX always casts at norm islands).
    ``kv_cache=True``: a decoder-only Hugging Face LM is exported with its KV cache as
    tensors (:mod:`halfprec.export.kv_cache`); ``inputs`` are token batches of at least 4
    tokens, from which halfprec checks a split prompt, a one-token step and an empty past.
    An encoder-decoder (T5, BART, Whisper) is written as two files,
    ``<stem>.encoder<suffix>`` and ``path`` (:mod:`halfprec.export.seq2seq`); the result
    describes the decoder file and holds the encoder's in ``companions``.
    """
    cfg = Recipe.of(recipe)
    if conversion_report(model) is not None:
        raise ExportError(
            "export converts the model itself and checks it against fp32; pass the original "
            "fp32 model with the same Recipe"
        )
    target = ExportConfig.for_path(
        Path(path),
        format,
        dtype=cfg.requested,
        dynamic=dynamic,
        half_io=half_io,
        opset=opset,
        kv_cache=kv_cache,
    )
    out = Path(path)
    batches = as_batches(inputs)
    tol = cfg.settle(model_device(model), tolerance).tolerance  # the recipe's by default
    step = _Step(target, cfg, half_io, tol, runs, name or type(model).__name__)
    if kv_cache and is_encoder_decoder(model):
        return _export_seq2seq(model, batches, out, step)
    reference: nn.Module
    if kv_cache:  # wraps, does not change, the model
        reference, batches = cache_reference(model, batches)
        notes = [KV_CACHE_NOTE]
    else:
        # A Hugging Face model with use_cache=True returns a cache object no exporter
        # takes: export a weight-sharing copy without it (the caller's model keeps its
        # config).
        reference, no_cache = without_cache(model)
        notes = [CACHE_NOTE] if no_cache else []
    return _export_checked(reference, batches, out, step, notes)


@dataclass(frozen=True)
class _Step:
    """What every file of one :func:`export` call shares."""

    target: ExportConfig
    cfg: Recipe
    half_io: bool
    tolerance: Tolerance | None
    runs: int
    name: str


def _export_seq2seq(model: nn.Module, batches: list[Any], out: Path, step: _Step) -> ExportResult:
    """An encoder-decoder as two checked files (:mod:`halfprec.export.seq2seq`); on
    failure neither is left behind."""
    ref = Seq2SeqReference(model, batches)
    first = encoder_path(out)
    # the encoder stays a temp file until the decoder is written and checked too, so a
    # failure leaves both previous files as they were
    with atomic_path(first) as staged:
        encoder = _export_checked(
            ref.encoder,
            ref.encoder_batches,
            staged,
            replace(step, name=f"{step.name} encoder"),
            [],
        )
        notes = [KV_CACHE_NOTE, SEQ2SEQ_NOTE.format(encoder=first.name)]
        result = _export_checked(ref.decoder, ref.decoder_batches, out, step, notes)
    result.companions = (replace(encoder, path=first),)
    return result


def _export_checked(
    reference: nn.Module, batches: list[Any], out: Path, step: _Step, notes: list[str]
) -> ExportResult:
    """Convert ``reference`` (fp32, not changed), write it to ``out`` and check the file."""
    target, cfg, half_io = step.target, step.cfg, step.half_io
    with evaluating(reference):  # the copy convert makes stays in eval mode
        ref_out = run_reference(reference, batches)
        half_dtype = _export_dtype(target, cfg, reference)
        half = convert(
            reference,
            cfg.replace(
                dtype=half_dtype,
                cast_outputs=not half_io,
                # ONNX ops take one dtype for all inputs
                mixed_kernels=cfg.mixed_kernels and target.format != "onnx",
            ),
        )
    report = conversion_report(half)
    assert report is not None  # convert() always attaches its report
    notes += exportable(half, target)
    params = forward_params(half)
    io_dtype = half_dtype if half_io else torch.float32

    def io_cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(io_dtype) if t.is_floating_point() else t

    named = [map_tensors(io_cast, named_inputs(b, params)) for b in batches]
    python_out = _run_half(half, named, half_dtype)
    info = ArtifactInfo(
        format=target.format,
        dtype=dtype_name(half_dtype),
        io_dtype=dtype_name(io_dtype),
        model=step.name,
        params=params,
        inputs=tuple(flatten(named[0])),
        outputs=tuple(flatten(python_out[0])),
        islands=dict(report.islands),
        static_shapes=None if target.dynamic or target.format == "torchscript" else _shapes(named),
        halfprec=__version__,
        kv_cache=step.target.kv_cache,
    )

    casts: list[OrtCasts] = []
    latency: list[OrtLatency] = []

    def check_file(tmp: Path) -> Verification:
        """Everything that reads the file, before it replaces a previous one: a failure
        here (exit 2) leaves no file behind."""
        artifact = load_artifact(tmp, format=target.format, device=model_device(half))
        verified = verify_artifact(artifact, batches, ref_out, tolerance=step.tolerance)
        if target.format == "onnx":
            casts.extend(_informational(notes, "onnxruntime Cast count", inspect_casts, tmp))
        if target.format == "onnx" and step.runs > 0:
            with evaluating(reference):
                args = (target, reference, named, info, tmp, step.runs)
                latency.extend(_informational(notes, "onnxruntime latency", _onnx_latency, *args))
        return verified

    check = write_artifact(target, half, named, out, info, verify=check_file, notes=notes)
    assert check is not None  # verify was given
    python_max_abs = (
        _max_abs([python_out[i] for i in check.checked_batches], check.outputs)
        if check.outputs
        else float("nan")
    )
    if target.format == "onnx":
        notes.append(provider_note(check.runtime.removeprefix("onnxruntime ")))
    return ExportResult(
        path=out,
        info=info,
        conversion=report,
        comparison=check.comparison,
        python_max_abs=python_max_abs,
        bytes_written=out.stat().st_size,
        checked_batches=len(check.checked_batches),
        skipped_batches=check.skipped_batches,
        notes=tuple(notes),
        ort_casts=casts[0] if casts else None,
        ort_latency=latency[0] if latency else None,
    )


def _informational(notes: list[str], what: str, figure: Callable[..., T], *args: Any) -> list[T]:
    """``[figure(*args)]``, or ``[]`` and a note "WHAT: n/a (reason)" where it fails: an
    informational figure never stops the command."""
    try:
        return [figure(*args)]
    except Exception as exc:  # onnxruntime's optimizer, the fp32 timing copy's export, ...
        notes.append(f"{what}: n/a ({first_line(exc)})")
        return []


def _run_half(half: nn.Module, named: list[dict[str, Any]], dtype: torch.dtype) -> list[Any]:
    """The converted model's outputs in this process; an :class:`ExportError` when it fails."""
    try:
        with torch.no_grad():
            return [call(half, n) for n in named]
    except Exception as exc:  # whatever the converted model raises
        raise ExportError(
            f"the {dtype_name(dtype)} model fails in PyTorch before export "
            f"({first_line(exc)}); keep the failing module in fp32 with "
            "keep_fp32/--keep-fp32, or check it with halfprec check"
        ) from exc


def _shapes(named: list[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(t.shape) for k, t in flatten(named[0]).items()}


def _onnx_latency(
    config: ExportConfig,
    reference: nn.Module,
    named: list[dict[str, Any]],
    info: ArtifactInfo,
    half_path: Path,
    runs: int,
) -> OrtLatency:
    """Export the fp32 model to a temporary ONNX file and time both with onnxruntime. The
    fp32 file goes through the rewrites the half one did (:func:`exportable`), on a copy
    that shares the reference's weights."""

    def to_fp32(t: torch.Tensor) -> torch.Tensor:
        return t.float() if t.is_floating_point() else t

    fp32_named = [map_tensors(to_fp32, n) for n in named]
    with tempfile.TemporaryDirectory(prefix="halfprec-onnx-") as tmp:
        fp32_path = Path(tmp) / "fp32.onnx"
        fp32_model = shared_copy(reference)
        exportable(fp32_model, config)
        write_artifact(config, fp32_model, fp32_named, fp32_path, fp32_info(info))
        return ort_latency(
            fp32_path,
            half_path,
            flatten(fp32_named[0]),
            flatten(named[0]),
            runs=runs,
            dtype=info.dtype,
        )
