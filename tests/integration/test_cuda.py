"""CUDA paths: run by scripts/gpu-check.sh on a machine with a GPU; skipped elsewhere."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from halfprec import convert
from halfprec.bench.results import BenchConfig
from halfprec.bench.runner import benchmark
from halfprec.dtypes import device_support
from halfprec.train.mixed import MixedPrecision
from halfprec.train.parallel import autocast_forward

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 8))


def test_cuda_device_table_and_converted_forward() -> None:
    sup = device_support("cuda")
    assert sup.fp16_fast and sup.fp16_runs
    model = _mlp().cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    for dtype in ("fp16", "bf16") if sup.bf16_runs else ("fp16",):
        half = convert(model, dtype)
        with torch.no_grad():
            out, ref = half(x), model(x)
        assert out.dtype == torch.float32 and out.device.type == "cuda"
        assert torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0) > 0.99


def test_cuda_grad_scaler_training_step() -> None:
    model = _mlp().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cuda")
    assert mp.scaling
    x, y = torch.randn(16, 64, device="cuda"), torch.randn(16, 8, device="cuda")
    before = model[0].weight.detach().clone()
    with mp.autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    mp.backward(loss)
    mp.step(opt)
    assert mp.steps_applied + mp.steps_skipped == 1
    assert mp.steps_skipped == 1 or not torch.equal(before, model[0].weight)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_cuda_autocast_forward_under_data_parallel() -> None:
    model = nn.DataParallel(autocast_forward(_mlp().cuda(), "fp16"))
    out = model(torch.randn(32, 64, device="cuda"))
    assert out.dtype == torch.float16 and out.shape == (32, 8)


def test_cuda_bench_compiled_variant_is_checked() -> None:
    cfg = BenchConfig(warmup=2, runs=3, memory="none")
    result = benchmark(
        _mlp().cuda(),
        torch.randn(64, 64, device="cuda"),
        variants=["halfprec-fp16"],
        compile=True,
        bench=cfg,
    )
    compiled = result.get("halfprec-fp16+compile")
    assert compiled.status == "ok" and compiled.accurate and compiled.compile_s is not None
    assert result.limit(torch.float16) is not None
