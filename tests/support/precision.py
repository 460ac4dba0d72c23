"""A caller's own fp32 settings for the length of a test (TF32 on CUDA, oneDNN's bf16 on
the CPU), restored afterwards, and an op that records the settings each call ran under."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["SEEN", "callers_fp32", "spy"]

_LEAVES = ("cuda.matmul", "cudnn.conv", "cudnn.rnn", "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")


def _node(path: str) -> object:
    node: object = torch.backends
    for part in path.split("."):
        node = getattr(node, part)
    return node


@contextlib.contextmanager
def callers_fp32(**settings: str) -> Iterator[None]:
    """Set ``mkldnn_matmul="bf16"``, ``cuda_matmul="tf32"``, ... (a leaf's path with ``_``
    for ``.``) as a user would, and restore every leaf when the block ends."""
    old = {path: _node(path).fp32_precision for path in _LEAVES}  # type: ignore[attr-defined]
    try:
        for key, value in settings.items():
            _node(key.replace("_", ".")).fp32_precision = value  # type: ignore[attr-defined]
        yield
    finally:
        for path, value in old.items():
            _node(path).fp32_precision = value  # type: ignore[attr-defined]


# (input dtype, oneDNN matmul precision, CUDA matmul precision) of each call of spy
SEEN: list[tuple[torch.dtype, str, str]] = []


@torch.library.custom_op("halfprec_test::spy", mutates_args=())
def spy(x: torch.Tensor) -> torch.Tensor:
    """``x + 0``, recording the fp32 settings in force (an op a model may call in forward)."""
    b = torch.backends
    SEEN.append((x.dtype, b.mkldnn.matmul.fp32_precision, b.cuda.matmul.fp32_precision))
    return x + 0


@spy.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)
