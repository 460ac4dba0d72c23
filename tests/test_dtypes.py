import pytest
import torch

from halfprec import dtypes
from halfprec.dtypes import (
    device_support,
    ensure_runnable,
    fits_in,
    parse_dtype,
    range_of,
    resolve_dtype,
)
from halfprec.errors import DTypeError


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("fp16", torch.float16),
        ("half", torch.float16),
        ("BF16", torch.bfloat16),
        ("bfloat16", torch.bfloat16),
        (torch.float16, torch.float16),
    ],
)
def test_parse_dtype_accepts_names(name: object, dtype: torch.dtype) -> None:
    assert parse_dtype(name) is dtype  # type: ignore[arg-type]


def test_parse_dtype_rejects_unknown_and_fp32_with_fix() -> None:
    with pytest.raises(DTypeError, match="unknown dtype 'fp8'; use one of: fp16, bf16, auto"):
        parse_dtype("fp8")
    with pytest.raises(DTypeError, match="not a half dtype"):
        parse_dtype("fp32")
    assert parse_dtype("fp32", allow_fp32=True) is torch.float32


def test_ranges_match_ieee() -> None:
    fp16 = range_of(torch.float16)
    assert fp16.max == 65504.0
    assert fp16.smallest_normal == pytest.approx(6.1035e-5, rel=1e-4)
    assert fp16.smallest_subnormal == pytest.approx(5.96e-8, rel=1e-3)
    assert torch.tensor(fp16.smallest_subnormal, dtype=torch.float16).item() > 0
    assert torch.tensor(fp16.smallest_subnormal / 4, dtype=torch.float16).item() == 0
    assert range_of(torch.bfloat16).max > 3e38


def test_fits_in() -> None:
    assert fits_in(torch.tensor([1.0, -65504.0]), torch.float16)
    assert not fits_in(torch.tensor([1.0, 7e4]), torch.float16)
    assert fits_in(torch.tensor([7e4, float("inf")]), torch.bfloat16)
    assert fits_in(torch.tensor([float("inf")]), torch.float16)


@pytest.mark.parametrize(
    ("flags", "dtype", "why"),
    [
        ({"amx_bf16", "amx_fp16"}, torch.bfloat16, "has fast bf16 kernels (amx_bf16, amx_fp16)"),
        ({"avx512f", "amx_fp16"}, torch.float16, "has fast fp16 but no fast bf16"),
        ({"avx512f"}, torch.bfloat16, "has no fast half kernels"),
    ],
)
def test_auto_follows_the_cpu_flags(
    monkeypatch: pytest.MonkeyPatch, flags: set[str], dtype: torch.dtype, why: str
) -> None:
    # /proc/cpuinfo is the one input the device table reads from this machine
    monkeypatch.setattr(dtypes, "_cpu_flags", lambda: frozenset(flags))
    assert device_support("cpu").bf16_fast == ("amx_bf16" in flags)
    choice = resolve_dtype("auto", "cpu")
    assert choice.dtype is dtype
    assert choice.reason.startswith("auto: ") and why in choice.reason


def test_explicit_dtype_reports_speed() -> None:
    choice = resolve_dtype("fp16", "cpu")
    assert choice.dtype is torch.float16
    assert "fp16" in choice.reason


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a device torch lacks")
def test_ensure_runnable_names_the_failure_and_the_other_dtype() -> None:
    with pytest.raises(
        DTypeError,
        match=r"^mps cannot run fp16 \(NotImplementedError: .*\); "
        r"use --dtype bf16 or auto$",
    ):
        ensure_runnable(torch.float16, "mps")
