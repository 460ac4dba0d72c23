"""The OpenVINO target: ``openvino.convert_model`` on the fp32 model, compiled for CPU with
an inference-precision hint (``f32``, ``bf16``, ``f16``).

OpenVINO's CPU plugin computes in bf16 (or f16) only on CPUs with native support
(AVX512-BF16, AMX); elsewhere it silently runs f32. :func:`half_support` reads the plugin's
``OPTIMIZATION_CAPABILITIES`` so that such a target is skipped, not timed as a duplicate of
fp32, and :func:`build` records the precision the compiled model reports.

A saved IR carries the precision halfprec checked in its runtime info
(``runtime_options/INFERENCE_PRECISION_HINT``, the key OpenVINO reads run-time options
from). OpenVINO 2026.4's CPU plugin applies only some keys of ``runtime_options`` (the KV
cache's precision, dynamic quantization) and not this one: a ``Core()`` with default
properties compiles an fp32 IR in bf16 on a CPU with AVX512-BF16 or AMX. :func:`compile_ir`
compiles a saved IR with the hint it carries, which is the way to load one.
"""

from __future__ import annotations

import errno
import inspect
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.atomic import made_folders, resolve_target, temp_dir
from halfprec.batch import Batch
from halfprec.errors import HalfprecError, require
from halfprec.export.hf import without_cache
from halfprec.quiet_logs import root_logger_kept
from halfprec.runtimes.module import Flat, FlatIO, RuntimeModule
from halfprec.runtimes.ov_telemetry import no_telemetry

# torch dtype -> OpenVINO's INFERENCE_PRECISION_HINT, its OPTIMIZATION_CAPABILITIES name,
# and the CPU features that give it
HINTS: dict[torch.dtype, tuple[str, str, str]] = {
    torch.float32: ("f32", "FP32", "any x86 CPU"),
    torch.bfloat16: ("bf16", "BF16", "AVX512-BF16 or AMX-BF16"),
    torch.float16: ("f16", "FP16", "AVX512-FP16 or AMX-FP16"),
}


PRECISION_KEY = ("runtime_options", "INFERENCE_PRECISION_HINT")
"""Where a saved IR's runtime info holds the inference precision halfprec checked."""


class ConversionError(HalfprecError, RuntimeError):
    """``openvino.convert_model`` could not convert the model."""


def _reason(exc: BaseException) -> str:
    """OpenVINO's summary line (``No conversion rule found for operations: ...``) rather
    than its first line, which names a source file of OpenVINO's."""
    lines = [ln.strip(" -") for ln in str(exc).splitlines() if ln.strip(" -")]
    summary = [ln for ln in lines if "conversion" in ln.lower() and ":" in ln]
    why = summary[-1] if summary else (lines[-1] if lines else type(exc).__name__)
    return (
        f"openvino.convert_model failed ({why}); run this model with torch, or replace "
        "what OpenVINO cannot convert"
    )


def import_openvino() -> Any:
    """``openvino``, imported without its telemetry's import event (:func:`no_telemetry`)."""
    with no_telemetry():
        return require("openvino", "openvino", "the openvino deploy target")


def half_support(dtype: torch.dtype) -> str | None:
    """None when the CPU plugin can compute in ``dtype``; else why not, in one line."""
    ov = import_openvino()
    caps = list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    hint, cap, needs = HINTS[dtype]
    if cap in caps:
        return None
    return (
        f"OpenVINO's CPU plugin has no {hint} here (capabilities {', '.join(caps)}; it needs "
        f"{needs}): the hint would run f32, as openvino-fp32 does"
    )


def build(model: nn.Module, batch: Batch, dtype: torch.dtype, threads: int) -> RuntimeModule:
    """Convert ``model`` (fp32, eval mode) traced on ``batch`` and compile it for CPU with
    ``dtype``'s precision hint, the LATENCY performance hint and ``threads`` threads."""
    ov = import_openvino()
    model, _ = without_cache(model)  # a cache object is no tensor a graph returns
    flat = Flat(model, FlatIO.inputs_of(model, batch)).eval()
    graph = _convert(ov, flat)
    io = flat.io.with_output(flat.output)  # the trace's own call: the model ran once
    name_ports(graph, io)
    config = {
        "INFERENCE_PRECISION_HINT": HINTS[dtype][0],
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": threads,
    }
    compiled = ov.Core().compile_model(graph, "CPU", config)
    precision = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()  # "f32", "bf16"
    request = compiled.create_infer_request()
    ports = list(compiled.outputs)

    def run(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        result = request.infer([t.detach().cpu().numpy() for t in tensors])
        return [torch.from_numpy(result[p]) for p in ports]

    def save(path: Path) -> Path:
        graph.set_rt_info(precision, list(PRECISION_KEY))  # what was checked, not asked
        return save_ir(graph, path)

    # convert_model shares the torch weights (share_weights=True): keep ``flat`` alive
    return RuntimeModule("openvino", precision, run, io, save, keep=(flat, graph, compiled))


def _convert(ov: Any, flat: Flat) -> Any:
    """``openvino.convert_model`` of ``flat`` traced on its example batch, by one call of
    the model. ``torch.jit.trace``'s own check (``check_trace``) is off: it traces and runs
    the model twice more (three quarters of a BERT's conversion) to compare the trace with
    the model on the same batch, which the check against fp32 that every target passes
    does too (OpenVINO's notebooks and optimum-intel convert with it off, the same way).
    OpenVINO's usage telemetry sends nothing for it (:mod:`~halfprec.runtimes.ov_telemetry`)."""
    example = tuple(flat.io.example)
    # tracing warns about every Python branch on a shape (transformers has many); the
    # check against fp32 that every target passes is what says the trace is right
    with torch.no_grad(), warnings.catch_warnings(), root_logger_kept(), no_telemetry():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", r"`torch\.jit\.trace", DeprecationWarning)
        try:
            source = _unchecked_trace(flat, example)
            return ov.convert_model(source, example_input=example)
        except Exception as exc:  # OpenVINO's own types; the reason is on a later line
            raise ConversionError(_reason(exc)) from None


def _unchecked_trace(flat: Flat, example: tuple[torch.Tensor, ...]) -> Any:
    """OpenVINO's TorchScript decoder of ``flat``, traced without ``check_trace``; ``flat``
    itself (OpenVINO then traces it, checked) where this OpenVINO's decoder takes no
    ``trace_kwargs``."""
    from openvino.frontend.pytorch.ts_decoder import TorchScriptPythonDecoder

    if "trace_kwargs" not in inspect.signature(TorchScriptPythonDecoder).parameters:
        return flat
    return TorchScriptPythonDecoder(
        flat, example_input=example, trace_kwargs={"check_trace": False}
    )


def save_ir(graph: Any, path: Path) -> Path:
    """Write ``graph`` to ``path`` (``NAME.xml`` + ``NAME.bin``, the weights as converted)
    whole in a folder beside it, then move both in: the .bin first, so a complete .xml
    never names a partial .bin. Missing folders are made, and removed on failure."""
    if path.suffix != ".xml":
        raise ValueError(f"OpenVINO IR is saved as NAME.xml (+ NAME.bin), got {path.name!r}")
    ov = import_openvino()
    dest = resolve_target(path)
    # pid in the temp folder's name: a kill -9 leaves no lasting litter
    with made_folders(dest.parent, path), temp_dir(dest.parent, path) as tmp:
        staged = tmp / dest.name
        try:
            ov.save_model(graph, str(staged), compress_to_fp16=False)
        except RuntimeError as exc:  # a C++ stream error that says nothing of why
            raise _write_error(exc, graph, dest.parent, path) from exc
        os.replace(staged.with_suffix(".bin"), dest.with_suffix(".bin"))
        os.replace(staged, dest)
    return path


def _write_error(exc: RuntimeError, graph: Any, folder: Path, path: Path) -> BaseException:
    """OpenVINO's failed write as the ``OSError`` it stands for, read from the file system
    (read-only; or too full for the graph's weights, which the .bin holds, OpenVINO having
    removed what it wrote), naming ``path``; else ``exc`` itself."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return exc
    weights = sum(op.get_byte_size() for op in graph.get_ops() if op.get_type_name() == "Constant")
    if fs.f_flag & os.ST_RDONLY:
        code = errno.EROFS
    elif fs.f_bavail * fs.f_frsize < weights or fs.f_favail == 0:
        code = errno.ENOSPC
    else:
        return exc
    return OSError(code, os.strerror(code), str(path))


def name_ports(graph: Any, io: FlatIO) -> None:
    """Give ``graph``'s inputs and outputs the model's names (``io.inputs``,
    ``io.outputs``), in place, so that the graph is fed and read by name.

    The converter names an input after the traced value (``attention_mask.1``) and an
    output after the op that made it, or not at all. A name given to an output whose
    tensor is an input's, or another output's, would be merged with theirs when the IR is
    read back, so each such output first gets a tensor of its own (a Convert to its own
    type, which changes no value)."""
    ops = import_openvino().opset13
    params, results = list(graph.get_parameters()), list(graph.get_results())
    if (len(params), len(results)) != (len(io.inputs), len(io.outputs)):
        raise ConversionError(
            f"openvino.convert_model made a graph of {len(params)} inputs and "
            f"{len(results)} outputs, the model has {len(io.inputs)} and {len(io.outputs)}; "
            "run this model with torch"
        )
    for param, name in zip(params, io.inputs, strict=True):
        param.output(0).get_tensor().set_names({name})
    seen: set[Any] = set()  # the ports already read by an output (ov.Output hashes by port)
    fresh = []
    for result in results:
        source = result.input_value(0)
        if source.get_node().get_type_name() == "Parameter" or source in seen:
            seen.add(source)
            source = ops.convert(source, source.get_element_type()).output(0)
        seen.add(source)
        fresh.append(ops.result(source))  # a new Result: an old one keeps its source's names
    for result in results:
        graph.remove_result(result)
    graph.add_results(fresh)
    for port, name in zip(graph.outputs, io.outputs, strict=True):
        port.get_tensor().set_names({name})


def compile_ir(path: str | os.PathLike[str], core: Any = None, device: str = "CPU") -> Any:
    """An IR saved by :meth:`RuntimeModule.save <halfprec.runtimes.RuntimeModule.save>`,
    compiled by ``core`` (default a new ``openvino.Core()``) at the precision halfprec
    checked it in, the hint its runtime info carries, whatever the device's default is.
    An IR without that entry compiles with the core's defaults."""
    ov = import_openvino()
    core = core if core is not None else ov.Core()
    model = core.read_model(str(path))
    config = {}
    if model.has_rt_info(list(PRECISION_KEY)):
        config["INFERENCE_PRECISION_HINT"] = model.get_rt_info(list(PRECISION_KEY)).astype(str)
    return core.compile_model(model, device, config)
