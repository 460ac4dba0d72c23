"""Where a benchmark's time goes: wall and CPU seconds by phase (scripted clocks; the real
CPU clock on child processes that burn a known amount of CPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from halfprec import BenchConfig
from halfprec.bench.phases import Phases, cpu_seconds, cpu_text
from halfprec.bench.runner import Benchmark
from halfprec.bench.variants import Variant


def test_phases_add_wall_and_cpu_and_move_a_compile_out_of_the_warm_up() -> None:
    ticks = iter([0.0, 3.0, 10.0, 10.5])
    phases = Phases(cpu_clock=lambda: next(ticks))
    with phases.phase("warm-up"):
        pass
    with phases.phase("timing"):
        pass
    assert phases.cpu == {"warm-up": 3.0, "timing": 0.5}
    phases.move("warm-up", "compile", 0.0, 2.0)
    assert phases.cpu == {"warm-up": 1.0, "timing": 0.5, "compile": 2.0}
    assert set(phases.wall) == {"warm-up", "timing", "compile"}
    total = {**phases.cpu, "total": 3.5}
    assert cpu_text(total) == "CPU 3.5 s: compile 2.0 s, warm-up 1.0 s, timing 0.5 s"
    assert cpu_text(phases.cpu) == ""  # no total: nothing to say


def test_a_benchmark_reports_cpu_seconds_by_the_same_phases_as_wall() -> None:
    model = nn.Linear(8, 8)
    config = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False)
    engine = Benchmark(
        model,
        torch.randn(2, 8),
        variants=[Variant("fp32"), Variant.parse("naive-bf16")],
        options=config,
        timer=lambda fn, v: (fn(), 1e-3)[1],
    )
    result = engine.run().result
    assert set(result.cpu_seconds) == set(result.seconds)
    assert result.cpu_seconds["total"] >= 0.0 and "cpu_seconds" in result.to_json()


_BURN = """
import sys, time
start = time.process_time()
while time.process_time() - start < 0.3:
    pass
print("burnt", flush=True)
if sys.argv[1] == "stay":
    sys.stdin.readline()
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="live children need /proc")
def test_cpu_seconds_count_children_that_exited_and_those_still_running() -> None:
    before = cpu_seconds()
    subprocess.run([sys.executable, "-c", _BURN, "exit"], check=True, capture_output=True)
    exited = cpu_seconds()
    assert exited - before >= 0.25  # the child's 0.3 s, reaped
    child = subprocess.Popen(
        [sys.executable, "-c", _BURN, "stay"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"burnt\n"
        assert cpu_seconds() - exited >= 0.25  # still running: read from /proc
    finally:
        child.communicate(b"\n", timeout=60)
    # reaped, its seconds move to RUSAGE_CHILDREN and are counted once (twice: >= 0.6)
    assert 0.25 <= cpu_seconds() - exited < 0.55
