"""StochasticAdamW's bucket kernel: eager in chunks, or compiled into one loop, with the
same bits either way (halfprec.train.adamw_kernel)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch._inductor.config
import torch._inductor.metrics
from torch.utils._python_dispatch import TorchDispatchMode

from halfprec.train.adamw_kernel import (
    CHUNK,
    COMPILE_FROM,
    BucketKernel,
    adamw_bucket,
    hyperparameters,
)

_GROUP = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}


def _bucket(n: int, dtype: torch.dtype = torch.bfloat16) -> list[torch.Tensor]:
    """Weight, gradient and moments of ``n`` elements, moments already warm."""
    gen = torch.Generator().manual_seed(n)
    weight = torch.randn(n, generator=gen)
    grad = torch.randn(n, generator=gen) * 1e-2
    m = torch.randn(n, generator=gen) * 1e-3
    v = torch.rand(n, generator=gen) * 1e-4
    return [t.to(dtype) for t in (weight, grad, m, v)]


def _run(kernel: BucketKernel, tensors: list[torch.Tensor], steps: int = 3) -> list[torch.Tensor]:
    out = [t.clone() for t in tensors]
    for step in range(1, steps + 1):
        keys = torch.tensor([11 * step, 5 + step, 0], dtype=torch.int32)
        hyper = hyperparameters(_GROUP, step, torch.device("cpu"))
        kernel((out[0], out[1], out[2], out[3]), hyper, keys, out[0].dtype == torch.bfloat16)
    return out


def _same_bits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    pairs = zip(a, b, strict=True)
    return all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in pairs)


def test_chunks_draw_the_bits_the_whole_bucket_would() -> None:
    """The eager kernel runs a bucket chunk by chunk; each chunk's counters start at its
    offset, so the result is the one call on the whole bucket, bit for bit."""
    tensors = _bucket(3 * CHUNK + 123)
    chunked = _run(BucketKernel(compile=False), tensors, steps=1)
    whole = [t.clone() for t in tensors]
    keys = torch.tensor([11, 6, 0], dtype=torch.int32)
    adamw_bucket(*whole, hyperparameters(_GROUP, 1, torch.device("cpu")), keys, True)
    assert _same_bits(chunked, whole)
    assert not _same_bits(chunked, tensors)  # it did update


class _Ops(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


def test_under_a_dispatch_mode_a_large_bucket_runs_eagerly() -> None:
    """torch.compile refuses to run under a Python dispatch mode (a profiler's, a
    counter's); a bucket that would compile runs eagerly there, with the same bits."""
    tensors = _bucket(COMPILE_FROM)
    with _Ops():
        under = _run(BucketKernel(compile=True), tensors, steps=1)
    assert _same_bits(under, _run(BucketKernel(compile=False), tensors, steps=1))


@pytest.mark.slow
def test_a_large_bucket_compiles_into_one_kernel_with_the_eager_bits() -> None:
    """One generated kernel (a single loop reads and writes every tensor once) for the
    whole step, and the weights and moments bit for bit those of the eager chunks, for
    bf16 (stochastic) and fp16 (nearest), over steps that change lr and bias correction."""
    for dtype in (torch.bfloat16, torch.float16):
        tensors = _bucket(COMPILE_FROM + 77, dtype)
        eager = _run(BucketKernel(compile=False), tensors)
        compiled = _run(BucketKernel(compile=True), tensors)
        assert _same_bits(compiled, eager), dtype
    torch._dynamo.reset()  # compiled again, from scratch: count what it generates
    torch._inductor.metrics.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        _run(BucketKernel(compile=True), _bucket(COMPILE_FROM))
    assert torch._inductor.metrics.generated_kernel_count == 1


@pytest.mark.slow
def test_where_compiling_fails_it_warns_once_and_runs_eagerly() -> None:
    """A C++ compiler that does not exist (as on a machine without one): one warning that
    says why and how to skip the attempt, then the eager results."""
    tensors = _bucket(COMPILE_FROM)
    torch._dynamo.reset()
    broken = {"cpp.cxx": (None, "/nonexistent/g++"), "force_disable_caches": True}
    with torch._inductor.config.patch(broken), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        kernel = BucketKernel(compile=True)
        got = _run(kernel, tensors)
    torch._dynamo.reset()
    messages = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    assert "torch.compile failed here" in messages[0] and "compile=False" in messages[0]
    assert kernel.failed is not None and "compiler" in kernel.failed.lower()
    assert _same_bits(got, _run(BucketKernel(compile=False), tensors))


@pytest.mark.slow
def test_a_compiled_bucket_keeps_zeros_signs_infs_and_nans() -> None:
    """The compiled kernel (inductor builds it with -fno-signed-zeros among its flags) keeps
    +0, -0, inf, -inf and bf16's largest values bit for bit under a zero update, and NaN as
    NaN, as the eager one does (tests/train/test_bf16.py)."""
    specials = [0.0, -0.0, 1.0, -2.5, math.inf, -math.inf, 3.3895e38, -3.3895e38, math.nan]
    values = torch.tensor(specials, dtype=torch.bfloat16)
    weight = values.repeat(COMPILE_FROM // len(specials) + 1)[:COMPILE_FROM].clone()
    before = weight.clone()
    grad, m, v = (torch.zeros_like(weight) for _ in range(3))
    group = {**_GROUP, "weight_decay": 0.0}
    hyper = hyperparameters(group, 1, torch.device("cpu"))
    keys = torch.tensor([3, 4, 0], dtype=torch.int32)
    BucketKernel(compile=True)((weight, grad, m, v), hyper, keys, True)
    nan = before.isnan()
    assert torch.equal(weight[~nan].view(torch.int16), before[~nan].view(torch.int16))
    assert bool(weight[nan].isnan().all())
