import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from halfprec import dtypes
from halfprec.dtypes import (
    device_support,
    ensure_runnable,
    fits_in,
    overflow_bound,
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


HALVES = [torch.float16, torch.bfloat16]
INF, NAN = float("inf"), float("nan")


def _above(x: float) -> float:
    return float(torch.nextafter(torch.tensor(x), torch.tensor(INF)))


def _below(x: float) -> float:
    return float(torch.nextafter(torch.tensor(x), torch.tensor(0.0)))


@pytest.mark.parametrize("dtype", HALVES)
def test_the_range_rule_at_its_edges(dtype: torch.dtype) -> None:
    """The largest finite value fits, and so does every fp32 value that rounds down to it;
    the bound itself (a tie, which rounds to even: inf) and beyond do not; inf, -inf and
    NaN fit (a cast keeps them as they are)."""
    top, bound = torch.finfo(dtype).max, overflow_bound(dtype)
    for fitting in (top, -top, _above(top), _below(bound), INF, -INF, NAN, 0.0):
        assert fits_in(torch.tensor([fitting]), dtype), fitting
    for beyond in (bound, -bound, _above(bound), 1e38 if dtype == torch.float16 else 3.4e38):
        assert not fits_in(torch.tensor([beyond]), dtype), beyond
        assert not fits_in(torch.tensor([INF, NAN, beyond]), dtype), beyond
    assert fits_in(torch.empty(0), dtype) and fits_in(torch.tensor([7]), dtype)


@settings(max_examples=300, deadline=None)
@given(
    x=st.floats(width=32, allow_nan=True, allow_infinity=True),
    dtype=st.sampled_from(HALVES),
)
def test_a_value_fits_exactly_when_its_cast_stays_what_it_was(x: float, dtype: torch.dtype) -> None:
    """The rule, stated by the cast itself: a finite value fits when the cast leaves it
    finite; a non-finite one always fits."""
    t = torch.tensor([x], dtype=torch.float32)
    cast_is_finite = bool(torch.isfinite(t.to(dtype)).all())
    assert fits_in(t, dtype) == (cast_is_finite or not math.isfinite(x))
    assert fits_in(t.double(), dtype) == fits_in(t, dtype)


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
