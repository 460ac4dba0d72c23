"""ONNX files, run and inspected with onnxruntime on CPU.

Export goes through ``torch.onnx.export(dynamo=True)`` on the same ``torch.export``
program as ``.pt2``, so the ONNX graph holds halfprec's casts as ``Cast`` nodes: fp32
inputs in, fp16 weights and compute, fp32 islands (LayerNormalization), fp32 outputs out
(like onnxconverter-common's ``keep_io_types=True``).

onnxruntime's CPU execution provider has no fp16 kernel for most operators on x86
(Gemm, MatMul, Softmax, elementwise ops). When it meets an fp16 node without a kernel it
inserts ``Cast`` nodes (named ``InsertedPrecisionFreeCast_*``) to run that node in fp32.
:func:`inspect_casts` counts them in onnxruntime's optimized graph, and names the
operator types that fall back. bf16 is refused (``config.check_onnx_dtype``): the CPU
provider has no bf16 Gemm kernel and rejects a bf16 graph at session creation.
"""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from halfprec.errors import HalfprecError, InputsError, clip, require, strip_ansi
from halfprec.export.capture import explain_failure
from halfprec.export.config import DEFAULT_OPSET, ExportError, RuntimeFailure
from halfprec.export.info import INFO_KEY, ArtifactInfo
from halfprec.export.onnx_ops import translations
from halfprec.export.onnx_reshape import contiguous_reshapes, is_strided_view_failure
from halfprec.modules import first_line
from halfprec.quiet_logs import quiet_logs
from halfprec.timing import Timing, measure

__all__ = [
    "OrtCasts",
    "OrtLatency",
    "OnnxSession",
    "check_providers",
    "provider_note",
    "import_onnx",
    "import_onnxruntime",
    "write_onnx",
    "load_onnx",
    "inspect_casts",
    "ort_latency",
]

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
PROVIDERS = (CPU_PROVIDER,)  # a session's default: timing and cast counting are CPU facts
_INSERTED_CAST = "InsertedPrecisionFreeCast"
_FLOAT = 1  # onnx.TensorProto.FLOAT
_ORT_STATUS = re.compile(r"\[ONNXRuntimeError\] : \d+ : (\w+) : ")
_ORT_TENSOR = re.compile(r"tensor\((\w+)\)")
_NUMPY_NAMES = {"float": "float32", "double": "float64"}  # the rest numpy and torch spell alike


def import_onnx() -> Any:
    return require("onnx", "onnx", "ONNX export")


def import_onnxruntime() -> Any:
    onnxruntime = require("onnxruntime", "onnx", "running ONNX files")
    onnxruntime.set_default_logger_severity(3)
    return onnxruntime


def _require_onnxscript() -> None:
    require("onnxscript", "onnx", "ONNX export (torch.onnx dynamo)")


def _fuse_fp32_layer_norms(model: Any) -> int:
    """Hand-written LayerNorms that compute in fp32 become ``LayerNormalization`` nodes.

    A hand-written norm kept as an fp32 island reads an fp16 value through a Cast. Left as
    separate ops, onnxruntime's own LayerNormFusion absorbs that Cast and builds a
    LayerNormalization with an fp16 input and an fp32 scale, then refuses the file ("Type
    parameter (T) of Optype (LayerNormalization) bound to different types"). onnxscript's
    fusion, applied first, keeps the input in fp32 (only fp32/fp64 patterns match, with
    the same epsilon), so nothing is left for onnxruntime to mis-fuse. Returns the count.
    """
    try:  # onnxscript keeps this rule out of its public API: without it, nothing changes
        from onnxscript.rewriter.rules.fusion._layer_norm import fuse_layer_normalization
    except ImportError:
        return 0
    count = int(fuse_layer_normalization(model))
    if count:
        from onnx_ir.passes.common import RemoveUnusedNodesPass

        RemoveUnusedNodesPass()(model)  # the fused ops' constants
    return count


def write_onnx(
    program: torch.export.ExportedProgram, path: Path, info: ArtifactInfo, opset: int
) -> None:
    """Translate ``program`` to ONNX and save it, weights inside, to ``path``."""
    onnx = import_onnx()
    _require_onnxscript()
    try:
        try:
            onnx_program = _translate(program, info, opset)
        except HalfprecError:
            raise
        except Exception as exc:
            if not is_strided_view_failure(exc) or not contiguous_reshapes(program):
                raise
            onnx_program = _translate(program, info, opset)  # each reshape on a copy
    except HalfprecError:
        raise
    except Exception as exc:  # the exporter wraps many error types
        # a KV-cache file needs dynamic lengths, and a static export was tried already:
        # --static is no way out there
        dynamic = not info.kv_cache and info.static_shapes is None
        why = explain_failure("torch.onnx.export", exc, can_be_static=dynamic)
        raise ExportError(why) from exc
    assert onnx_program is not None  # dynamo=True always returns the program
    written = next(
        (o.version for o in onnx_program.model_proto.opset_import if not o.domain), opset
    )
    if written != opset:  # torch.onnx keeps its own opset when it cannot convert, and says so
        raise ExportError(  # only in a log line: the file would not be what was asked for
            f"torch.onnx.export cannot write opset {opset} (it would write opset {written}); "
            f"pass a lower opset, or leave --opset out for opset {DEFAULT_OPSET}"
        )
    if info.dtype != "fp32":  # an fp32 file has no island Cast to mis-fuse: left as exported
        _fuse_fp32_layer_norms(onnx_program.model)
    proto = onnx_program.model_proto
    entry = proto.metadata_props.add()
    entry.key, entry.value = INFO_KEY, info.to_json_text()
    if proto.ByteSize() >= 2**31 - 1:
        raise ExportError(
            "the ONNX model is over 2 GB, which needs external weight files; halfprec writes "
            "single-file ONNX only: export to a .pt2 file (-o NAME.pt2)"
        )
    onnx.save(proto, str(path))


def _translate(program: torch.export.ExportedProgram, info: ArtifactInfo, opset: int) -> Any:
    """``torch.onnx.export`` of ``program``, its notices kept off the terminal."""
    with (
        quiet_logs("torch.onnx"),  # "torchvision is not installed" notices are not ours
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        _exact_rewrites(),
    ):
        return torch.onnx.export(
            program,
            input_names=list(info.inputs),
            output_names=list(info.outputs),
            opset_version=opset,
            custom_translation_table=translations(opset),
            dynamo=True,
            verbose=False,
        )


@contextlib.contextmanager
def _exact_rewrites() -> Iterator[None]:
    """Run torch.onnx's graph optimizer without onnxscript's no-op rules (``x + 0``,
    ``x - 0``, ``x * 1``, ``x / 1``, dropout): they match constants within 1e-8 of 0 or 1,
    so they delete an epsilon like ``var + 1e-12`` and a constant row then divides 0 by 0
    (NaN, in fp32 too). onnxruntime removes true no-ops itself when it loads the file."""
    try:
        from onnxscript import rewriter
        from onnxscript.rewriter.rules.common import _no_op
    except ImportError:  # another onnxscript layout: nothing to remove
        yield
        return
    rules = getattr(rewriter, "_DEFAULT_REWRITE_RULES", None)
    no_op = getattr(getattr(_no_op, "rules", None), "rules", None)
    if rules is None or no_op is None:
        yield
        return
    rewriter._DEFAULT_REWRITE_RULES = tuple(r for r in rules if r not in set(no_op))
    try:
        yield
    finally:
        rewriter._DEFAULT_REWRITE_RULES = rules


class OnnxSession:
    """An onnxruntime CPU session fed with torch tensors by ONNX input name: the one place
    halfprec opens an ONNX file.

    ``threads``: intra-op threads, one inter-op thread (None: onnxruntime's defaults);
    ``optimized``: where onnxruntime writes the graph it optimized. A file onnxruntime
    refuses is one :class:`ExportError` naming ``source`` (default: the path) and ``fix``.
    """

    def __init__(
        self,
        path: Path,
        *,
        threads: int | None = None,
        optimized: Path | None = None,
        source: str | None = None,
        fix: str = "re-export it with halfprec export -o NAME.onnx",
        providers: tuple[str, ...] = PROVIDERS,
    ) -> None:
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.log_severity_level = 4  # fatal only: an error is raised, not logged too
        if threads is not None:
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        if optimized is not None:
            options.optimized_model_filepath = str(optimized)
        try:
            self.session = ort.InferenceSession(str(path), options, providers=list(providers))
        except Exception as exc:  # onnxruntime raises its own exception types
            why = _reason(exc, f"Load model from {path} failed:")
            raise ExportError(f"onnxruntime cannot load {source or path} ({why}); {fix}") from None
        # what onnxruntime really opened: it falls back to the CPU when CUDA fails to load
        self.providers: tuple[str, ...] = tuple(self.session.get_providers())
        inputs = self.session.get_inputs()
        self.input_names = [i.name for i in inputs]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._takes = [(i.name, _dtype_name(i.type), list(i.shape)) for i in inputs]

    def feeds(self, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
        """``tensors`` by the graph's input names (others are left out), as numpy arrays; an
        :class:`InputsError` naming an input that is missing."""
        try:
            return {n: tensors[n].detach().cpu().numpy() for n in self.input_names}
        except KeyError:
            missing = [n for n in self.input_names if n not in tensors]
            raise InputsError(
                f"the ONNX model needs inputs {missing} that the batch does not have; "
                f"give inputs named {self.input_names}"
            ) from None
        except TypeError:  # a dtype numpy has no name for (bfloat16)
            given = {n: (_torch_name(tensors[n].dtype), tuple(tensors[n].shape)) for n in tensors}
            if (misfit := self._misfit(given)) is not None:
                raise InputsError(misfit) from None
            raise

    def run(self, feeds: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The outputs by name (:meth:`run_list`'s, keyed by :attr:`output_names`)."""
        return dict(zip(self.output_names, self.run_list(feeds), strict=True))

    def run_list(self, feeds: dict[str, Any]) -> list[torch.Tensor]:
        """The outputs in the graph's order; an :class:`InputsError` naming an input of
        another dtype or shape than the graph takes (onnxruntime's own error says neither
        which nor how), else a :class:`RuntimeFailure` with onnxruntime's reason."""
        try:
            results = self.session.run(self.output_names, feeds)
        except Exception as exc:  # onnxruntime's own types, none of them a RuntimeError
            # checked only once onnxruntime refused: a call that runs pays nothing for it;
            # numpy is there, onnxruntime needs it, but importing halfprec must not
            import numpy as np

            arrays = {n: a for n, a in feeds.items() if isinstance(a, np.ndarray)}
            if misfit := self._misfit({n: (a.dtype.name, a.shape) for n, a in arrays.items()}):
                raise InputsError(misfit) from None
            raise RuntimeFailure(f"onnxruntime: {_reason(exc)}") from None
        return [torch.from_numpy(r) for r in results]

    def _misfit(self, given: dict[str, tuple[str, tuple[int, ...]]]) -> str | None:
        """Why the first input in ``given`` (name: dtype name, shape) that the graph takes
        otherwise does not fit it, in one line; None when all fit. A named (or unknown)
        size takes any size."""
        for name, want, shape in self._takes:
            if name not in given:  # onnxruntime's own message names a missing feed
                continue
            dtype, sizes = given[name]
            if _fits(dtype, sizes, want, shape):
                continue
            dims = ", ".join("?" if d is None else str(d) for d in shape)
            free = ["?" if d is None else str(d) for d in shape if not isinstance(d, int)]
            any_size = f" ({', '.join(free)}: any size)" if free else ""
            return (
                f"input {name!r} is {dtype} {list(sizes)}, the ONNX model takes "
                f"{want or 'its dtype'} [{dims}]{any_size}; give {name!r} in that dtype and shape"
            )
        return None


def _fits(
    dtype: str, sizes: tuple[int, ...], want: str | None, shape: list[int | str | None]
) -> bool:
    if (want is not None and dtype != want) or len(sizes) != len(shape):
        return False
    return all(not isinstance(d, int) or d == n for d, n in zip(shape, sizes, strict=True))


def _dtype_name(ort_type: str) -> str | None:
    """``tensor(float)`` -> ``float32``: the name numpy and torch give onnxruntime's tensor
    type (None for a type that is no tensor)."""
    match = _ORT_TENSOR.fullmatch(ort_type)
    return None if match is None else _NUMPY_NAMES.get(match[1], match[1])


def _torch_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _reason(exc: Exception, repeated: str = "") -> str:
    """onnxruntime's error in one line: its status and message, as in ``NOT_IMPLEMENTED:
    Could not find an implementation for Gemm(13) ...``, without the ``[ONNXRuntimeError] :
    N :`` frame or ``repeated`` (the file's path, which the caller names); another error
    as :func:`~halfprec.modules.first_line` shows it."""
    text = strip_ansi(str(exc))
    if repeated:
        text = text.replace(repeated, " ")
    text = " ".join(text.split())
    status = _ORT_STATUS.match(text)
    if status is None:
        return first_line(exc)
    return f"{status[1]}: {clip(text[status.end() :], 240)}"


def check_providers(
    device: torch.device | str, available: tuple[str, ...] | list[str] | None = None
) -> tuple[str, ...]:
    """The onnxruntime providers a file exported from a model on ``device`` is checked on:
    the CUDA provider (the CPU one behind it, for ops it has no kernel for) when the model
    ran on CUDA and onnxruntime has it (``available``: default
    ``onnxruntime.get_available_providers()``), else the CPU provider alone."""
    if torch.device(device).type != "cuda":
        return PROVIDERS
    if available is None:
        available = import_onnxruntime().get_available_providers()
    return (CUDA_PROVIDER, CPU_PROVIDER) if CUDA_PROVIDER in available else PROVIDERS


def provider_note(provider: str) -> str:
    """The export note naming the provider a file was checked on, and what that means."""
    if provider == CPU_PROVIDER:
        return (
            f"checked with onnxruntime's {CPU_PROVIDER}, which runs most fp16 ops in fp32 "
            "(ort_casts counts them): on the CUDA provider the file computes in fp16, which "
            "this check did not see; check it on a machine with onnxruntime-gpu for that"
        )
    return f"checked with onnxruntime's {provider}, the provider that runs it on this machine"


def load_onnx(
    path: Path, *, providers: tuple[str, ...] = PROVIDERS
) -> tuple[OnnxSession, ArtifactInfo]:
    """An onnxruntime session for ``path`` and the halfprec metadata stored in it."""
    session = OnnxSession(path, providers=providers)
    meta = session.session.get_modelmeta().custom_metadata_map
    if INFO_KEY not in meta:
        raise ExportError(f"{path} was not written by halfprec export; re-export it with halfprec")
    return session, ArtifactInfo.from_json_text(meta[INFO_KEY], str(path))


@dataclass
class OrtCasts:
    """Where onnxruntime's CPU provider had to leave fp16 for fp32."""

    casts_in_file: int
    casts_inserted: int
    fp32_fallback_ops: dict[str, int] = field(default_factory=dict)
    nodes_optimized: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def inspect_casts(path: Path) -> OrtCasts:
    """Count the Cast nodes onnxruntime adds to run fp16 nodes it has no kernel for."""
    onnx = import_onnx()
    original = onnx.load(str(path), load_external_data=False)
    with tempfile.TemporaryDirectory(prefix="halfprec-ort-") as tmp:
        optimized_path = Path(tmp) / "optimized.onnx"
        OnnxSession(path, optimized=optimized_path)
        optimized = onnx.load(str(optimized_path), load_external_data=False)
    consumers: dict[str, list[Any]] = {}
    for node in optimized.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    inserted = [
        n for n in optimized.graph.node if n.op_type == "Cast" and n.name.startswith(_INSERTED_CAST)
    ]
    fallback: Counter[str] = Counter()
    for cast in inserted:
        to = next((a.i for a in cast.attribute if a.name == "to"), None)
        if to == _FLOAT:
            for node in {id(c): c for c in consumers.get(cast.output[0], [])}.values():
                fallback[node.op_type] += 1
    return OrtCasts(
        casts_in_file=sum(n.op_type == "Cast" for n in original.graph.node),
        casts_inserted=len(inserted),
        fp32_fallback_ops=dict(fallback.most_common()),
        nodes_optimized=len(optimized.graph.node),
    )


@dataclass
class OrtLatency:
    """onnxruntime CPU latency of the fp32 export and the half export, same batch."""

    fp32: Timing
    half: Timing
    bytes_fp32: int
    dtype: str

    @property
    def speedup(self) -> float:
        return self.fp32.median / self.half.median

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "fp32_median_s": self.fp32.median,
            "half_median_s": self.half.median,
            "speedup": self.speedup,
            "bytes_fp32": self.bytes_fp32,
        }


def ort_latency(
    fp32_path: Path,
    half_path: Path,
    fp32_inputs: dict[str, torch.Tensor],
    half_inputs: dict[str, torch.Tensor],
    *,
    runs: int,
    dtype: str,
) -> OrtLatency:
    """Time both files on the same batch, one after the other in this process."""
    timings = []
    for p, tensors in ((fp32_path, fp32_inputs), (half_path, half_inputs)):
        session = OnnxSession(p)
        feeds = session.feeds(tensors)

        def step(session: OnnxSession = session, feeds: dict[str, Any] = feeds) -> None:
            session.session.run(None, feeds)

        timings.append(measure(step, runs=runs))
    return OrtLatency(timings[0], timings[1], fp32_path.stat().st_size, dtype)
