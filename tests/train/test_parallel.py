"""autocast_forward: replicas compute in the requested dtype, whatever thread runs them."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn

import halfprec
from halfprec.train import AutocastForward, MixedPrecision, autocast_forward


class _Recorder(nn.Module):
    """Two linear layers; records the dtype the first one computed in."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.inner(x)
        self.seen.append(hidden.dtype)
        return self.head(hidden).float()


def _like_parallel_apply(module: nn.Module, x: torch.Tensor) -> Any:
    """Run ``module`` the way torch.nn.parallel.parallel_apply runs a replica: in a new
    thread that re-enters autocast with ``enabled`` only (no dtype)."""
    enabled = torch.is_autocast_enabled(x.device.type)
    result: dict[str, Any] = {}

    def worker() -> None:
        with torch.amp.autocast(x.device.type, enabled=enabled):
            result["out"] = module(x)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    return result["out"]


def test_replica_thread_loses_dtype_without_wrapper_and_keeps_it_with() -> None:
    x = torch.randn(3, 4)
    plain, wrapped_inner = _Recorder(), _Recorder()
    wrapped = autocast_forward(wrapped_inner, "fp16")
    with torch.autocast("cpu", dtype=torch.float16):
        assert plain(x).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.float16):
        _like_parallel_apply(plain, x)
        _like_parallel_apply(wrapped, x)
    # The main thread computed in fp16, the bare replica thread fell back to the device's
    # default autocast dtype (bf16 on CPU): the bug the wrapper exists for.
    assert plain.seen == [torch.float16, torch.get_autocast_dtype("cpu")]
    assert plain.seen[1] != torch.float16
    assert wrapped_inner.seen == [torch.float16]


def test_wrapper_inside_dataparallel_trains_in_requested_dtype() -> None:
    inner = _Recorder()
    model = nn.DataParallel(autocast_forward(inner, "bf16"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("bf16", "cpu")
    loss = nn.functional.cross_entropy(model(torch.randn(6, 4)), torch.tensor([0, 1] * 3))
    mp.backward(loss)
    assert mp.step(optimizer).applied
    assert inner.seen == [torch.bfloat16]
    assert not torch.is_autocast_enabled("cpu")  # restored after forward
    assert inner.inner.weight.dtype == torch.float32  # master weights stay fp32


def test_explicit_device_type_and_inference_from_inputs() -> None:
    inner = _Recorder()
    explicit = autocast_forward(inner, torch.bfloat16, device_type="cpu")
    explicit(torch.randn(2, 4))
    assert inner.seen == [torch.bfloat16]
    assert "dtype=bf16, device_type=cpu" in repr(explicit)
    assert "device_type=from inputs" in repr(autocast_forward(nn.Linear(2, 2), "fp16"))
    assert isinstance(explicit, AutocastForward) and explicit.module is inner
    assert "autocast_forward" not in halfprec.__all__  # lives in halfprec.train


def test_bad_arguments_name_the_fix() -> None:
    with pytest.raises(TypeError, match=r"takes an nn.Module, got function"):
        autocast_forward(lambda x: x, "fp16")  # type: ignore[arg-type]
    with pytest.raises(halfprec.DTypeError, match=r"fp32 is not a half dtype"):
        autocast_forward(nn.Linear(2, 2), "fp32")


@pytest.mark.skipif(
    not torch.accelerator.is_available() or torch.accelerator.device_count() < 2,
    reason="real DataParallel replicas need two accelerator devices",
)
def test_real_dataparallel_replicas_compute_in_requested_dtype() -> None:
    device = torch.accelerator.current_accelerator()
    assert device is not None
    dtypes: list[torch.dtype] = []
    inner = nn.Linear(4, 4).to(device)
    inner.register_forward_hook(lambda _m, _i, out: dtypes.append(out.dtype))
    wanted = (
        torch.bfloat16 if torch.get_autocast_dtype(device.type) != torch.bfloat16 else torch.float16
    )
    model = nn.DataParallel(autocast_forward(inner, wanted))
    with torch.autocast(device.type, dtype=wanted):
        model(torch.randn(8, 4, device=device))
    assert len(dtypes) >= 2 and set(dtypes) == {wanted}
