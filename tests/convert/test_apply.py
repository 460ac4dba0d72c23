"""convert casts through Module._apply, so subclass overrides (cache drops) run like .to()."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from halfprec import convert
from halfprec.convert import conversion_report
from halfprec.leaks.audit import audit


class CachedProjection(nn.Module):
    """Caches a derived tensor (LeViT's attention-bias cache) and drops it in ``_apply``."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 8))
        self.norm = nn.LayerNorm(8)
        self.cache: dict[str, torch.Tensor] = {}

    def derived(self) -> torch.Tensor:
        if "w" not in self.cache:
            self.cache["w"] = self.table.t().contiguous()
        return self.cache["w"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x @ self.derived())

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        self.cache = {}
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True) -> CachedProjection:
        self.cache = {}  # LeViT also drops the cache on every mode switch
        return super().train(mode)


def test_cache_dropped_by_apply_override_after_fp32_forward() -> None:
    torch.manual_seed(0)
    model = CachedProjection().eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        ref = model(x)  # fills the fp32 cache
    half = convert(model, "fp16")
    out = half(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    assert model.cache["w"].dtype == torch.float32  # the original keeps its own cache
    assert half.norm.weight.dtype == torch.float32  # islands still stay fp32


def test_audit_does_not_hide_a_stale_cache() -> None:
    """audit runs the model as given: no eval() call that would drop a stale fp32 cache."""
    torch.manual_seed(0)
    model = CachedProjection().eval()
    x = torch.randn(4, 8)
    half = convert(model, "fp16")
    with torch.no_grad():
        half.cache["w"] = model.table.t().contiguous()  # stale fp32, as p.data casts left it
    report = audit(half, x)
    assert [leak.op for leak in report.leaks] == ["Tensor.matmul"]
    assert "w" in half.cache  # still there: audit changed nothing


def test_audit_leaves_the_training_flag_alone() -> None:
    half = convert(CachedProjection().train(), "fp16")
    audit(half, torch.randn(4, 8))
    assert half.training and half.norm.training


class DeviceKeyedCache(nn.Module):
    """transformers' LeViT: a derived-tensor cache keyed by device only, no ``_apply``
    override, so ``.to(dtype)`` keeps the stale fp32 entry."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 8))
        self.cache: dict[str, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = str(x.device)
        if key not in self.cache:
            self.cache[key] = self.table.t().contiguous()
        return x @ self.cache[key]


def test_device_keyed_cache_is_cast_where_to_dtype_crashes() -> None:
    torch.manual_seed(0)
    model = DeviceKeyedCache().eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        ref = model(x)  # fills the fp32 cache
    naive = copy.deepcopy(model).to(torch.float16)
    with pytest.raises(RuntimeError, match="dtype"):
        naive(x.half())
    half = convert(model, "fp16")
    torch.testing.assert_close(half(x), ref, atol=2e-2, rtol=2e-2)
    assert model.cache["cpu"].dtype == torch.float32  # the original keeps its own cache
    report = conversion_report(half)
    assert report is not None and report.attributes_cast == ["cache"]
