"""CUDA paths: run by scripts/gpu-check.sh (its step 1) on a machine with a GPU; skipped
elsewhere. Each defect the CPU can only show through a stand-in is also checked here for
real: the IEEE fp32 reference under TF32, a CUDA reference against files run on the CPU,
and a tuned model with no host sync per forward, captured by hand in a CUDA graph."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn

from halfprec import check, convert, export
from halfprec.bench.results import BenchConfig
from halfprec.bench.runner import benchmark
from halfprec.dtypes import device_support
from halfprec.train.mixed import MixedPrecision
from halfprec.train.parallel import autocast_forward
from support.tuned import HostSyncs, tuned_toy

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


@pytest.mark.skipif(
    bool(os.environ.get("GPU_CHECK_NO_COMPILE")),
    reason=os.environ.get("GPU_CHECK_NO_COMPILE", ""),
)
def test_cuda_bench_compiled_variant_is_checked() -> None:
    # one max-autotune variant (the compile is most of the GPU check's step 1)
    cfg = BenchConfig(warmup=2, runs=3, memory="none")
    result = benchmark(
        _mlp().cuda(),
        torch.randn(64, 64, device="cuda"),
        variants=["halfprec-fp16+compile"],
        bench=cfg,
    )
    assert [r.name for r in result.results] == ["fp32", "halfprec-fp16+compile"]
    compiled = result.get("halfprec-fp16+compile")
    assert compiled.status == "ok" and compiled.accurate and compiled.compile_s is not None
    assert result.limit(torch.float16) is not None


def test_cuda_reference_is_ieee_fp32_under_the_new_tf32_api() -> None:
    matmul = torch.backends.cuda.matmul
    old = matmul.fp32_precision
    matmul.fp32_precision = "tf32"
    try:
        seen: list[str] = []
        model = _mlp().cuda().eval()
        model.register_forward_pre_hook(lambda m, a: seen.append(matmul.fp32_precision))
        result = check(model, torch.randn(16, 64, device="cuda"), "fp16", runs=0)
        assert seen[0] == "ieee"  # the reference ran first, in IEEE fp32
        assert "CUDA matmuls in tf32" in result.comparison.set_aside
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = old


@pytest.mark.parametrize("suffix", [".ts", ".onnx"])
def test_cuda_model_export_checks_a_cpu_run_file(tmp_path: Path, suffix: str) -> None:
    if suffix == ".onnx":
        pytest.importorskip("onnxruntime")
    model = _mlp().cuda().eval()
    batches = [torch.randn(4, 64, device="cuda"), torch.randn(6, 64, device="cuda")]
    result = export(model, batches, tmp_path / f"m{suffix}", "fp16")
    assert result.passed, result.comparison.reason
    assert result.python_max_abs < 0.05


def test_cuda_tuned_forward_makes_no_host_sync_and_captures_in_a_cuda_graph() -> None:
    model = tuned_toy().cuda()
    x = torch.randn(8, 4, device="cuda")
    with torch.no_grad(), HostSyncs() as syncs:
        eager = model(x)
    assert syncs.count == 0
    static = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        model(static)  # warm up on a side stream, as torch.cuda.graph asks
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        captured = model(static)
    graph.replay()
    torch.testing.assert_close(captured, eager)


def test_cuda_stochastic_adamw_step_copies_its_scalars_pinned_and_non_blocking() -> None:
    """One StochasticAdamW step sends its hyperparameters and keys to the GPU from pinned
    memory without blocking (a pageable copy synchronises the stream), and reads nothing
    back."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from halfprec.train import StochasticAdamW

    copies: list[tuple[bool, bool]] = []

    class HostToDevice(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            if func is torch.ops.aten._to_copy.default and args[0].device.type == "cpu":
                device = kwargs.get("device")
                if device is not None and torch.device(device).type == "cuda":
                    copies.append((args[0].is_pinned(), bool(kwargs.get("non_blocking"))))
            return func(*args, **kwargs)

    model = _mlp().cuda().to(torch.bfloat16)
    model(torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)).float().sum().backward()
    opt = StochasticAdamW(model.parameters(), lr=1e-3, compile=False)
    with HostSyncs() as syncs, HostToDevice():
        opt.step()
    assert syncs.count == 0
    assert copies and all(pinned and non_blocking for pinned, non_blocking in copies), copies
