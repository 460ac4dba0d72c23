"""Timed rounds in pairs: each candidate alternates with eager fp32, its speedup comes from
fp32's calls in its own pair, and the race ranks candidates of different pairs through fp32
(scripted timings only: no test here depends on the machine's speed)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.bench.results import fastest_variant
from halfprec.bench.variants import Variant


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(16, 16)


X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
TEN = BenchConfig(warmup=1, runs=10, memory="none", skip_slower_than=None, limit=False)


class Machine:
    """A scripted machine whose load changes between variants: a timed call of a variant
    takes its time per call (``seconds``) times the load, and the load becomes
    ``loads[name]`` when that variant's turn begins (the progress callback)."""

    def __init__(self, seconds: dict[str, float], loads: dict[str, float]) -> None:
        self.seconds, self.loads, self.load = seconds, loads, 1.0
        self.calls: list[str] = []

    def progress(self, step: int, total: int, label: str) -> None:
        self.load = self.loads.get(label.split(" @ ")[0], self.load)

    def __call__(self, fn: Callable[[], object], variant: Variant) -> float:
        self.calls.append(variant.name)
        return self.seconds[variant.name] * self.load


def _pair(candidate: str, rounds: int) -> list[str]:
    """The timed calls of ``rounds`` rounds of a pair: fp32 first, then the candidate first
    in the next round, and so on (the order alternates)."""
    return [n for r in range(rounds) for n in ("fp32", candidate)[:: 1 if r % 2 == 0 else -1]]


def _run(machine: Machine, bench: BenchConfig = TEN) -> list[str]:
    result = benchmark(
        _model(),
        X,
        variants=["halfprec-bf16", "halfprec-fp16"],
        bench=bench,
        timer=machine,
        progress=machine.progress,
    )
    assert all(r.accurate for r in result.results)
    return machine.calls


def test_each_candidate_is_timed_in_its_own_pair_and_measured_against_it() -> None:
    # the machine is half as loaded from fp16's turn on: fp32 took 1.0 s a call beside
    # bf16 and 0.5 s beside fp16
    machine = Machine(
        {"fp32": 1.0, "halfprec-bf16": 0.45, "halfprec-fp16": 0.97}, {"halfprec-fp16": 0.5}
    )
    result = benchmark(
        _model(),
        X,
        variants=["halfprec-bf16", "halfprec-fp16"],
        bench=BenchConfig(**{**TEN.__dict__, "race": None, "runs": 3}),
        timer=machine,
        progress=machine.progress,
    )
    pair = _pair("halfprec-bf16", 3) + _pair("halfprec-fp16", 3)
    assert machine.calls == pair  # one candidate at a time, alternating with fp32
    fp32, bf16, fp16 = (result.get(n) for n in ("fp32", "halfprec-bf16", "halfprec-fp16"))
    assert fp32.timing is not None and fp32.timing.samples == (1.0,) * 3 + (0.5,) * 3
    # each speedup over fp32's calls in its own pair, not over fp32's pooled median (0.75 s)
    assert bf16.speedup == pytest.approx(1.0 / 0.45)
    assert fp16.speedup == pytest.approx(1.0 / 0.97)
    assert fp32.speedup == pytest.approx(1.0)
    assert any("the fp32 row pools fp32's calls from every pair" in w for w in result.warnings)
    # bf16 is chosen by its time relative to fp32, not by seconds measured under other load
    # (fp16's 0.485 s a call is close to bf16's 0.45 s)
    assert fastest_variant(result).name == "halfprec-bf16"


def test_the_race_stops_a_candidate_clearly_slower_than_one_of_an_earlier_pair() -> None:
    # fp16 runs as fast as fp32 (0.97x its time: no verdict against fp32 alone in 10
    # rounds), but over twice bf16's time relative to fp32, which was timed in an earlier
    # pair under twice the load: it stops after 2 rounds, as it would beside bf16 (bf16,
    # the leader, runs the race's claim_rounds: 5)
    machine = Machine(
        {"fp32": 1.0, "halfprec-bf16": 0.45, "halfprec-fp16": 0.97}, {"halfprec-fp16": 0.5}
    )
    calls = _run(machine)
    assert calls == _pair("halfprec-bf16", 5) + _pair("halfprec-fp16", 2)
    # alone with fp32 the same fp16 goes the distance: close to fp32, nothing else to beat it
    alone = Machine({"fp32": 1.0, "halfprec-fp16": 0.97}, {})
    benchmark(_model(), X, variants=["halfprec-fp16"], bench=TEN, timer=alone)
    assert alone.calls == _pair("halfprec-fp16", 10)


def test_a_later_faster_candidate_does_not_stop_before_min_rounds_on_close_calls() -> None:
    # bf16 0.95x fp32 first, fp16 0.9x: close to both (within the 10% margin of bf16), so
    # the race keeps timing fp16 every round
    machine = Machine({"fp32": 1.0, "halfprec-bf16": 0.95, "halfprec-fp16": 0.9}, {})
    calls = _run(machine)
    assert calls.count("halfprec-fp16") == 10
