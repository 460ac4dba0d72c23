"""report.common: a printed speed ratio carries its spread, and a ranking only when the
spread supports it (injected timings, no timed test)."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from torch import nn

from halfprec.check import CheckResult, check
from halfprec.report.common import print_check
from halfprec.report.json_text import to_json_text
from halfprec.timing import Ratio, Timing, spread_text


def test_spread_text_ranks_only_a_one_sided_spread() -> None:
    assert spread_text(Ratio(2.1, 1.95, 2.3, 10)) == "2.10x faster (IQR 1.95-2.30x over 10 rounds)"
    assert spread_text(Ratio(0.5, 0.45, 0.6, 10)) == "2x slower (IQR 1.67-2.22x over 10 rounds)"
    assert (
        spread_text(Ratio(1.74, 0.27, 4.8, 6)) == "too noisy to rank (IQR 0.27-4.80x over 6 rounds)"
    )
    assert (
        spread_text(Ratio(3.0, 3.0, 3.0, 1)) == "too noisy to rank (3.00x from 1 round: no spread)"
    )


@pytest.fixture(scope="module")
def measured() -> CheckResult:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
    return check(model, torch.randn(4, 8), "bf16", runs=0)


def _with(result: CheckResult, fp32: tuple[float, ...], half: tuple[float, ...]) -> CheckResult:
    return dataclasses.replace(result, latency_fp32=Timing(fp32), latency_half=Timing(half))


def _printed(result: CheckResult) -> str:
    out = io.StringIO()
    print_check(result, Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_check_json_carries_the_spread(measured: CheckResult) -> None:
    noisy = _with(measured, (1.0, 0.9, 1.1, 2.0, 3.0), (2.0, 1.0, 1.0, 1.0, 1.0))
    data = json.loads(to_json_text(noisy.to_json()))
    assert data["speedup"] == 1.1
    spread = data["speedup_spread"]  # the Ratio's own JSON (tests/test_timing.py)
    assert (spread["q1"], spread["q3"], spread["rounds"], spread["ranked"]) == (0.9, 2.0, 5, False)
    assert json.loads(to_json_text(measured.to_json()))["speedup_spread"] is None  # runs=0


def test_check_prints_too_noisy_instead_of_a_ranking(measured: CheckResult) -> None:
    noisy = _printed(_with(measured, (1.0, 0.9, 1.1, 2.0, 3.0), (2.0, 1.0, 1.0, 1.0, 1.0)))
    assert "too noisy to rank (IQR 0.90-2.00x over 5 rounds)" in noisy
    assert "faster" not in noisy and "slower" not in noisy
    steady = _printed(_with(measured, (2.0, 20.0, 4.0), (1.0, 10.0, 2.0)))
    assert "2.00x faster (IQR 2.00-2.00x over 3 rounds)" in steady


rounds = st.lists(st.tuples(st.floats(1e-4, 1.0), st.floats(1e-4, 1.0)), min_size=1, max_size=12)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(rounds)
def test_no_ranking_is_printed_that_the_spread_does_not_support(
    measured: CheckResult, pairs: list[tuple[float, float]]
) -> None:
    result = _with(measured, tuple(a for a, _ in pairs), tuple(b for _, b in pairs))
    text = _printed(result)
    speed = result.speed
    assert speed is not None
    ranked_in_text = "x faster" in text or "x slower" in text
    assert ranked_in_text == speed.ranked
    assert speed.ranked == (len(pairs) > 1 and (speed.q1 > 1 or speed.q3 < 1))


def test_check_says_its_speed_is_per_round_not_the_ratio_of_the_medians(
    measured: CheckResult,
) -> None:
    # medians 1.0 s and 1.5 s, but half ran faster in most paired rounds: no single line
    # may put "1.0 s, 1.5 s" beside "faster" as if one came from the other
    text = _printed(_with(measured, (1.0, 1.0, 0.5, 3.0, 3.0), (0.9, 0.9, 1.5, 2.0, 2.5)))
    latency = next(line for line in text.splitlines() if "median latency" in line)
    assert "faster" not in latency and "slower" not in latency
    speed = next(line for line in text.splitlines() if "speed per paired round" in line)
    assert "faster" in speed
    assert "median of the per-round ratios fp32/half" in text
