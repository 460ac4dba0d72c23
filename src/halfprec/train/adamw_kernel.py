"""The one kernel of :class:`~halfprec.train.bf16.StochasticAdamW`: AdamW on one flat
bucket, read and written in the parameters' half dtype, computed in fp32.

:func:`adamw_bucket` is plain torch arithmetic. :class:`BucketKernel` runs it compiled
(``torch.compile``, dynamic shapes: one compile per process for every bucket size) on
buckets large enough to pay for it, so that inductor fuses it into one loop that reads
each weight, gradient and moment once and writes them once, with the random bits made in
registers. Smaller buckets, or every bucket where compiling is off or fails, run the same
function eagerly: on a CPU in chunks of :data:`CHUNK` elements (their temporaries stay in
cache), elsewhere whole (each of its ~80 operations is a kernel launch). Integer bits and
float operations are the same either way (tested), so whether a bucket was compiled does
not change a bit.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from halfprec.modules import first_line
from halfprec.train.rounding import random_bits, round_with

CHUNK = 1 << 16  # eager on a CPU: elements per chunk (its temporaries stay in cache)
COMPILE_FROM = 1 << 20  # buckets at least this large run compiled (a compile costs seconds)
_LOW16 = 0xFFFF


def hyperparameters(group: dict[str, Any], step: int, device: torch.device) -> torch.Tensor:
    """The fp32 numbers :func:`adamw_bucket` reads, for ``group`` at ``step`` (counted from
    1), as one tensor on ``device`` (a tensor, so that a compiled kernel does not recompile
    when the learning rate or the step changes): weight decay factor, 1 - beta1, beta2,
    1 - beta2, step size lr / (1 - beta1**step), sqrt(1 - beta2**step) and eps. They are
    the numbers torch's AdamW computes from the same group."""
    beta1, beta2 = group["betas"]
    lr = group["lr"]
    values = (
        1 - lr * group["weight_decay"],
        1 - beta1,
        beta2,
        1 - beta2,
        lr / (1 - beta1**step),
        math.sqrt(1 - beta2**step),
        group["eps"],
    )
    return to_device(torch.tensor(values, dtype=torch.float32), device)


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A new host tensor on ``device`` without waiting for it: to CUDA pinned and copied
    non-blocking (a copy from pageable memory synchronises the stream first; the pinned
    block is not reused before the copy has run); on the CPU itself."""
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def adamw_bucket(
    weight: torch.Tensor,
    grad: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    hyper: torch.Tensor,
    keys: torch.Tensor,
    stochastic: bool,
) -> None:
    """One AdamW step on flat tensors of one length, in place: ``weight`` and the moments
    ``m`` and ``v`` (a half dtype) are read into fp32, updated as torch's AdamW updates
    them (decoupled weight decay, bias correction; ``hyper`` from :func:`hyperparameters`)
    and written back, stochastically rounded when ``stochastic`` (bf16; else rounded to
    nearest). ``keys``: int32 (first key, second key, counter offset) of the random bits
    (:func:`~halfprec.train.rounding.random_bits`): element i of the bucket uses counters
    2 (offset + i) and 2 (offset + i) + 1, so that a chunk at ``offset`` draws the bits the
    whole bucket would."""
    decay, keep1, beta2, keep2, step_size, root2, eps = hyper.unbind()
    g = grad.float()
    m32 = m.float()
    m32 = m32 + keep1 * (g - m32)  # m.lerp(g, 1 - beta1), written out: one formula everywhere
    v32 = v.float() * beta2 + keep2 * (g * g)
    w32 = weight.float() * decay
    w32 = w32 - step_size * (m32 / (v32.sqrt() / root2 + eps))
    if not stochastic:
        weight.copy_(w32)
        m.copy_(m32)
        v.copy_(v32)
        return
    first, second, offset = keys.unbind()
    counters = (torch.arange(weight.numel(), device=weight.device, dtype=torch.int32) + offset) * 2
    bits = random_bits(counters, first, second)
    more = random_bits(counters + 1, first, second)
    weight.copy_(round_with(w32, bits & _LOW16))
    m.copy_(round_with(m32, (bits >> 16) & _LOW16))
    v.copy_(round_with(v32, more & _LOW16))


@functools.cache
def _compiled() -> Callable[..., None]:
    """:func:`adamw_bucket` under ``torch.compile`` (made once per process)."""
    return torch.compile(adamw_bucket, dynamic=True, fullgraph=True)  # type: ignore[return-value]


class BucketKernel:
    """Runs :func:`adamw_bucket` on a bucket: compiled when ``compile`` and the bucket has
    at least :data:`COMPILE_FROM` elements, else eagerly chunk by chunk (also under a
    Python dispatch mode, which ``torch.compile`` refuses). When compiling fails (no C++
    compiler, for one), it warns once, names why, and runs eagerly from then on: the same
    results, slower."""

    def __init__(self, *, compile: bool) -> None:
        self.compile = compile
        self.failed: str | None = None  # why compiling failed, once it has

    def _compiles(self, n: int) -> bool:
        """Whether a bucket of ``n`` elements runs compiled."""
        wanted = self.compile and self.failed is None and n >= COMPILE_FROM
        return wanted and _get_current_dispatch_mode() is None

    def __call__(
        self,
        tensors: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        hyper: torch.Tensor,
        keys: torch.Tensor,
        stochastic: bool,
    ) -> None:
        """:func:`adamw_bucket` on ``tensors`` (weight, gradient and moments, flat, of one
        length), with ``hyper``, ``keys`` and ``stochastic`` as there."""
        n = tensors[0].numel()
        if self._compiles(n):
            try:
                _compiled()(*tensors, hyper, keys, stochastic)
                return
            except torch._dynamo.exc.TorchDynamoException as exc:  # raised before it runs
                self.failed = first_line(exc)
                warnings.warn(
                    f"StochasticAdamW: torch.compile failed here ({self.failed}); its kernel "
                    "runs eagerly instead (the same results, slower). StochasticAdamW("
                    "compile=False) skips the attempt",
                    RuntimeWarning,
                    stacklevel=4,
                )
        first, second, offset = keys.unbind()
        size = CHUNK if tensors[0].device.type == "cpu" else max(n, 1)  # elsewhere: launches
        for start in range(0, n, size):
            weight, grad, m, v = (t[start : start + size] for t in tensors)
            chunk_keys = torch.stack((first, second, offset + start))
            adamw_bucket(weight, grad, m, v, hyper, chunk_keys, stochastic)
