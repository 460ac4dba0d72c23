"""The one table of runtime targets: which runtimes, in which precisions, where they can
run, and how each is built."""

from __future__ import annotations

import importlib

import torch
from torch import nn

from halfprec.batch import Batch
from halfprec.dtypes import dtype_name
from halfprec.runtimes.module import RuntimeModule

# runtime -> (the packages it imports, the halfprec extra, the precisions offered)
_TABLE: dict[str, tuple[tuple[str, ...], str, tuple[torch.dtype, ...]]] = {
    "openvino": (("openvino",), "openvino", (torch.float32, torch.bfloat16, torch.float16)),
    "onnxruntime": (("onnxruntime", "onnx", "onnxscript"), "onnx", (torch.float32,)),
}
RUNTIMES: tuple[str, ...] = tuple(_TABLE)


def runtime_dtypes(runtime: str) -> tuple[torch.dtype, ...]:
    """The precisions ``runtime`` is offered in (onnxruntime: fp32 only; see ``ort``)."""
    if runtime not in _TABLE:
        raise ValueError(f"unknown runtime {runtime!r}; use one of: {', '.join(RUNTIMES)}")
    return _TABLE[runtime][2]


def unavailable(runtime: str, dtype: torch.dtype, device: torch.device | str) -> str | None:
    """Why ``runtime`` cannot run ``dtype`` here, in one line (None: it can): a device other
    than the CPU, a package not installed, a half precision the CPU has no kernels for."""
    dev = torch.device(device)
    if dev.type != "cpu":
        return f"{runtime} targets run on the CPU; the model is on {dev}"
    packages, extra, _ = _TABLE[runtime]
    missing = [p for p in packages if not _importable(p)]
    if missing:
        return (
            f"{runtime}-{dtype_name(dtype)} needs {', '.join(missing)}, not installed; "
            f"install it with: pip install 'halfprec[{extra}]'"
        )
    if runtime == "openvino" and dtype != torch.float32:
        from halfprec.runtimes import ov

        return ov.half_support(dtype)
    return None


def _importable(package: str) -> bool:
    try:
        importlib.import_module(package)
    except ImportError:
        return False
    return True


def build_runtime(
    model: nn.Module, runtime: str, dtype: torch.dtype, batch: Batch
) -> RuntimeModule:
    """``model`` (fp32, eval mode; not changed) compiled by ``runtime`` in ``dtype``, traced
    on ``batch``, with as many threads as torch uses."""
    if dtype not in runtime_dtypes(runtime):
        raise ValueError(f"{runtime} runs {', '.join(map(dtype_name, runtime_dtypes(runtime)))}")
    threads = torch.get_num_threads()
    if runtime == "openvino":
        from halfprec.runtimes import ov

        return ov.build(model, batch, dtype, threads)
    from halfprec.runtimes import ort

    return ort.build(model, batch, threads)
