"""True fp32: the reference every verdict is judged against.

On Ampere and later GPUs cuDNN convolutions use TF32 by default, and
``torch.set_float32_matmul_precision("high")`` (or ``torch.backends.cuda.matmul.
fp32_precision = "tf32"``) makes fp32 matmuls TF32; on CPUs oneDNN can compute fp32
matmuls and convolutions in bf16 (``torch.backends.mkldnn.*.fp32_precision = "bf16"``). A
"reference" computed under any of these has ~10 mantissa bits, not 23, so a half model
compared with it is judged against a half-like model.

:func:`exact_fp32` sets every backend's fp32 precision to ``"ieee"`` for the duration of a
``with`` block and restores each one afterwards, through torch's new precision API only:
reading the legacy ``allow_tf32`` flags after a user set the new API raises "mix of the
legacy and new APIs" (torch 2.9 and later), so halfprec never reads them.
:func:`reduced_fp32` names what the process had set, for the report.

Two jobs, two contexts: :func:`exact_fp32` is for the *reference*, the outputs a half model
is judged against. Everything *measured* (warm-ups, timings, the probes) runs under the
caller's own settings, as the user's fp32 model runs; :func:`fp32_settings` says what they
were ("matmul ieee, cudnn conv tf32, cudnn rnn tf32"), for the report.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

# The leaves of torch's fp32 precision tree: (dotted path under torch.backends, operation).
_LEAVES = (
    ("cuda.matmul", "CUDA matmuls"),
    ("cudnn.conv", "cuDNN convolutions"),
    ("cudnn.rnn", "cuDNN RNNs"),
    ("mkldnn.matmul", "oneDNN matmuls"),
    ("mkldnn.conv", "oneDNN convolutions"),
    ("mkldnn.rnn", "oneDNN RNNs"),
)


def _backend(path: str) -> Any:
    node: Any = torch.backends
    for part in path.split("."):
        node = getattr(node, part, None)
        if node is None:
            return None
    return node if hasattr(node, "fp32_precision") else None


def _precisions() -> dict[str, str]:
    """Each leaf's fp32 precision as torch reports it ("ieee", "tf32", "bf16" or "none",
    which defers to its parent and so to the legacy flags)."""
    found: dict[str, str] = {}
    for path, _ in _LEAVES:
        node = _backend(path)
        if node is not None:
            found[path] = str(node.fp32_precision)
    return found


# A device type's leaves, by the name the report gives them.
_DEVICE_LEAVES = {
    "cuda": (("cuda.matmul", "matmul"), ("cudnn.conv", "cudnn conv"), ("cudnn.rnn", "cudnn rnn")),
    "cpu": (
        ("mkldnn.matmul", "matmul"),
        ("mkldnn.conv", "onednn conv"),
        ("mkldnn.rnn", "onednn rnn"),
    ),
}


def _effective(path: str) -> str:
    """A leaf's precision with "none" resolved through its parents (``cudnn.conv`` ->
    ``cudnn`` -> ``torch.backends``); "ieee" where every level says "none", torch's default
    (the legacy ``allow_tf32`` flags, when set, write the leaves too)."""
    parts = path.split(".")
    for depth in range(len(parts), -1, -1):
        node: Any = torch.backends
        for part in parts[:depth]:
            node = getattr(node, part, None)
        value = str(getattr(node, "fp32_precision", "none"))
        if value != "none":
            return value
    return "ieee"


def fp32_settings(device: torch.device | str) -> str:
    """How this process computes fp32 on ``device``'s type as set now, e.g. ``"matmul
    ieee, cudnn conv tf32, cudnn rnn tf32"`` (CUDA's defaults in torch 2.13): the settings
    fp32 is timed under. ``""`` for a device type without such settings."""
    leaves = _DEVICE_LEAVES.get(torch.device(device).type, ())
    return ", ".join(
        f"{name} {_effective(path)}" for path, name in leaves if _backend(path) is not None
    )


def reduced_fp32() -> tuple[str, ...]:
    """The operations this process computes in less than fp32 when asked for fp32, e.g.
    ``("CUDA matmuls in tf32",)``; empty when every fp32 op is IEEE fp32. Reads torch's
    new precision API only, so it never raises for a mix of legacy and new settings."""
    names = dict(_LEAVES)
    return tuple(
        f"{names[path]} in {value}"
        for path, value in _precisions().items()
        if value not in ("ieee", "none")
    )


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """IEEE fp32 for every fp32 matmul, convolution and RNN on every backend inside the
    block (TF32 and oneDNN's bf16 off), whatever the process had set; each setting is
    restored afterwards, also when the block raises. Only torch's new precision API is read
    and written, so a legacy ``allow_tf32`` set by the caller still reads back the same."""
    old = _precisions()
    try:
        for path in old:
            _backend(path).fp32_precision = "ieee"
        yield
    finally:
        for path, value in old.items():
            _backend(path).fp32_precision = value
