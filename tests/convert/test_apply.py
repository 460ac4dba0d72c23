"""convert casts through Module._apply, so subclass overrides (cache drops) run like .to()."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from halfprec import convert
from halfprec.convert import conversion_report
from support.cached import CachedProjection


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
