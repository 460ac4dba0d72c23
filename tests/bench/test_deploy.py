"""``halfprec.deploy``: the fastest checked module for the device, with its report."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import halfprec
from halfprec import BenchConfig, Tolerance, compare
from halfprec.bench.deploy import Deployed
from halfprec.timing import Timing
from testbed.clocks import ScriptedClock


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.down = nn.Linear(64, 16)
        self.drop = nn.Dropout(0.5)  # active in train mode: deploy must evaluate a copy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.drop(torch.relu(self.norm(self.up(x)))))


def _x() -> torch.Tensor:
    return torch.randn(8, 32, generator=torch.Generator().manual_seed(1))


def _fastest_accurate(done: Deployed) -> str:
    """The control: the variant with the smallest median among those timed and accurate,
    fp32 on a tie (fp32 is listed first)."""
    rows = [r for r in done.report.results if r.status == "ok" and r.accurate]
    return min(rows, key=lambda r: r.median_s if r.median_s is not None else float("inf")).name


TIMED = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, limit_budget_s=1)
ALL_SLOW = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=1e-9)


def test_deploy_returns_a_checked_module_and_leaves_the_model_alone() -> None:
    model = Block().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    done = halfprec.deploy(model, _x(), "bf16", compile=False, bench=TIMED)
    assert isinstance(done, Deployed) and done.model is not model
    assert done.variant == _fastest_accurate(done) and done.choice.accurate
    # the module returned is the variant named: its weights are in that variant's dtype
    assert done.model.up.weight.dtype == done.choice.variant.dtype
    assert model.training and model.drop.training  # still in train mode, same weights
    after = model.state_dict()
    assert all(
        torch.equal(before[k], after[k]) and after[k].dtype == before[k].dtype for k in after
    )
    # the returned module passes the same check on the same batch
    tol = Tolerance.for_dtype(done.choice.variant.dtype)
    assert compare(model.eval(), done.model, _x(), tolerance=tol).passed
    # the report: every variant tried, the bf16 limit, and the numbers behind the choice
    assert [r.name for r in done.report.results] == ["fp32", "halfprec-bf16"]
    lim = done.report.limit(torch.bfloat16)
    assert lim is not None and lim.method == "gemm"
    if done.variant == "halfprec-bf16":
        assert done.limit == lim and done.efficiency == pytest.approx(done.speedup / lim.ratio)
    else:
        assert (done.speedup, done.limit, done.efficiency) == (1.0, None, None)
    assert done.compile_s is None  # nothing compiled
    assert done.to_json()["variant"] == done.variant and "auto_choice" in done.to_json()["report"]


def test_deploy_never_picks_a_variant_slower_than_fp32() -> None:
    done = halfprec.deploy(Block(), _x(), compile=False, bench=TIMED)  # "auto": every dtype
    fp32 = done.report.get("fp32")
    assert fp32.median_s is not None and done.choice.median_s is not None
    assert done.choice.median_s <= fp32.median_s
    faster = [
        r
        for r in done.report.results
        if r.status == "ok"
        and r.accurate
        and r.median_s is not None
        and r.median_s < done.choice.median_s
    ]
    assert faster == []  # nothing accurate beat the choice either
    assert done.variant == "fp32" or done.speedup > 1.0


def test_deploy_never_times_a_dtype_the_probe_found_slow() -> None:
    done = halfprec.deploy(Block(), _x(), "auto", compile=False, bench=ALL_SLOW)
    half = [r for r in done.report.results if r.variant.kind != "fp32"]
    assert half and all(r.status == "skipped" and r.timing is None for r in half)
    assert all("slower than fp32 on this device" in r.note for r in half)
    assert all(lim.method == "probe" for lim in done.report.limits[8].values())
    assert (done.variant, done.speedup, done.limit, done.efficiency) == ("fp32", 1.0, None, None)
    assert "skipped (probed slow): halfprec-" in done.summary
    assert done.summary.startswith("fp32: 1.00x fp32, within tolerance")


@pytest.mark.slow
def test_deploy_compiled_only_still_measures_against_eager_fp32() -> None:
    # everything half probed slow: only fp32+compile compiles (one compile, ~20 s on 2 cores);
    # one warm-up call: a compiled variant gets one more, so that its compiling call is not
    # the one held against max_call_s
    bench = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=1e-9)
    done = halfprec.deploy(Block(), _x(), "bf16", eager=False, bench=bench)
    names = [r.name for r in done.report.results]
    assert names == ["fp32", "fp32+compile", "halfprec-bf16+compile"]
    compiled = done.report.get("fp32+compile")
    assert compiled.status == "ok" and compiled.compile_s is not None and compiled.accurate
    assert done.report.get("halfprec-bf16+compile").status == "skipped"
    assert done.variant == _fastest_accurate(done)  # fp32 or fp32+compile, by their medians
    compiled_model = any(n.endswith("_orig_mod") for n, _ in done.model.named_modules())
    assert compiled_model == (done.variant == "fp32+compile")
    assert done.seconds["compile"] == pytest.approx(compiled.compile_s)
    assert "compile " in done.time_spent
    with torch.no_grad():
        assert torch.allclose(done.model(_x()), Block().eval()(_x()), atol=1e-5)


def test_deploy_times_a_fast_dtype_a_noisy_probe_misread_and_says_where_time_went() -> None:
    # the issue's reading: bf16's first calls hit by load, "4.2x slower than fp32"
    wild = ScriptedClock([0.010], [0.042, 0.042, 0.042, 0.005])
    bench = BenchConfig(warmup=1, runs=3, memory="none", limit_budget_s=1)
    done = halfprec.deploy(Block(), _x(), "bf16", compile=False, bench=bench, probe_timer=wild)
    bf16 = done.report.get("halfprec-bf16")
    assert bf16.status == "ok" and bf16.timing is not None  # timed, not skipped
    assert wild.calls["half"] >= 5  # in doubt the probe took more rounds
    phases = {"probe", "limit", "build", "warm-up", "compare", "timing"}
    assert phases <= set(done.seconds) and "compile" not in done.seconds
    assert all(done.seconds[k] >= 0 for k in phases)
    assert sum(done.seconds[k] for k in phases) <= done.seconds["total"]
    assert done.time_spent.startswith(f"deploy took {done.seconds['total']:.1f} s: ")
    assert f"timing {done.seconds['timing']:.1f} s" in done.time_spent
    assert done.to_json()["seconds"] == done.seconds


class Counting(Block):
    calls = 0  # on the class: shared by the copies deploy builds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).calls += 1
        return super().forward(x)


def test_deploy_warms_an_eager_variant_once_before_timing_it() -> None:
    # every half dtype probed slow (scripted), so only eager fp32 is called: once to warm up
    # (recording its products, giving the reference output), then its timed rounds
    Counting.calls = 0
    slow = ScriptedClock([0.001], [1.0])
    done = halfprec.deploy(Counting(), _x(), "bf16", compile=False, probe_timer=slow)
    timing = done.report.get("fp32").timing
    assert done.variant == "fp32" and timing is not None
    assert Counting.calls == len(timing.samples) + 1


def test_deploy_rejects_nothing_to_try() -> None:
    with pytest.raises(ValueError, match="nothing to try; set compile or eager"):
        halfprec.deploy(Block(), _x(), compile=False, eager=False)


def test_summary_and_json_carry_the_spread_of_the_chosen_variant() -> None:
    done = halfprec.deploy(Block(), _x(), "bf16", compile=False, bench=TIMED)
    rows = {r.name: r for r in done.report.results}
    rows["fp32"].timing = Timing((1.0, 0.9, 1.1, 2.0, 3.0))  # injected: rounds that disagree
    rows["halfprec-bf16"].timing = Timing((2.0, 1.0, 1.0, 1.0, 1.0))
    noisy = Deployed(done.model, rows["halfprec-bf16"], done.report)
    assert noisy.summary.startswith(
        "halfprec-bf16: too noisy to rank (IQR 0.90-2.00x over 5 rounds) than fp32"
    )
    assert noisy.to_json()["speedup_spread"]["ranked"] is False
    rows["fp32"].timing = Timing((2.0, 20.0, 4.0))
    rows["halfprec-bf16"].timing = Timing((1.0, 10.0, 2.0))
    steady = Deployed(done.model, rows["halfprec-bf16"], done.report)
    assert "2.00x faster (IQR 2.00-2.00x over 3 rounds) than fp32" in steady.summary
    assert Deployed(done.model, rows["fp32"], done.report).to_json()["speedup_spread"] is None
