"""deploy's time budget: a compile estimated past the seconds left is not started, a spent
budget starts no candidate, and the compiles go likeliest winner first (scripted clocks,
paces and timings; nothing here compiles)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import halfprec
from halfprec import BenchConfig
from halfprec.bench.budget import (
    CALL_CPU_S,
    CONV_CALL_CPU_S,
    LIFT,
    OP_CPU_S,
    PACE_POWER,
    STOPPABLE_SHARE,
    WALL_PER_CPU,
    Budget,
    pace_of,
    process_start,
    thread_pace,
)
from halfprec.bench.deadline import can_stop
from halfprec.bench.order import by_expected_gain
from halfprec.bench.race import Race
from halfprec.bench.results import fastest_variant
from halfprec.bench.runner import Benchmark
from halfprec.bench.variants import Variant
from testbed.clocks import VariantClock

X = torch.randn(8, 32, generator=torch.Generator().manual_seed(1))
TIMED = BenchConfig(
    warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False, probe_cache=False
)
FP32, BF16, FP16 = (
    Variant("fp32"),
    Variant("halfprec", torch.bfloat16),
    Variant.parse("halfprec-fp16"),
)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 16))


class _Clock:
    """The budget's wall clock: ``now`` seconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_compile_estimated_past_the_seconds_left_is_not_started() -> None:
    """MobileViT-small's fp32 compile took 115 CPU-seconds of a 244 s cold deploy on a Zen 3:
    a compile estimated longer than the budget left is skipped before it starts, with the
    estimate and the knob in its note; the choice comes from what was measured."""
    seen: list[str] = []
    budget = Budget(50.0, clock=_Clock(), pace=lambda: 400.0)  # a machine 400 times slower
    run = Benchmark(
        _model(),
        X,
        variants=[FP32, FP32.with_compile()],
        options=TIMED,
        timer=VariantClock({"fp32": 1e-3}),
        progress=lambda _s, _t, label: seen.append(label),
        budget=budget,
    ).run()
    row = run.result.get("fp32+compile")
    assert row.status == "skipped" and row.compile_s is None
    assert row.note.startswith("not compiled within the 50 s budget: its compile is estimated at")
    assert "its rounds" not in row.note  # the compile alone does not fit: no call timed for it
    assert f"distinct operations at {OP_CPU_S:g}, " in row.note
    assert "at pace 400.0:" in row.note
    assert row.note.endswith("budget_s=None (--budget 0) lifts it")  # deploy's and bench's
    assert fastest_variant(run.result).name == "fp32" and not budget.compiled


class _Cold(nn.Module):
    """A model whose first call takes 100 s on the budget's clock and every later one 1 s."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self.clock, self.inner = clock, _model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.now += 100.0 if self.clock.now == 0.0 else 1.0
        return self.inner(x)


def test_a_candidate_s_rounds_are_reckoned_from_a_warm_fp32_call_not_the_cold_first() -> None:
    """deploy warms eager fp32 with one call, and a first call is cold (BERT-base b8 at
    load 5: 14 s, a warm one about 2 s); reckoned from it, a candidate's 3 rounds of a pair
    and the end's re-timing read 1400 s, not 14 s."""
    clock = _Clock()
    budget = Budget(300.0, clock=clock, pace=lambda: 1.0)
    budget.record(Variant("halfprec", torch.bfloat16, compiled=True), 190.0)  # 190 s fits
    run = Benchmark(
        _Cold(clock),
        X,
        variants=[FP32, FP32.with_compile()],
        options=TIMED,
        timer=VariantClock({"fp32": 1.0}),
        budget=budget,
    ).run()
    note = run.result.get("fp32+compile").note  # 190 + 14 > 300 - 101
    assert note.startswith("not compiled within the 300 s budget") and "its rounds at 14 s" in note


def test_a_spent_budget_starts_no_further_candidate_and_the_choice_is_what_was_measured() -> None:
    """halfprec-fp16 is timed first and beats fp32; the budget is spent by then, so
    halfprec-bf16 is never built: the choice is halfprec-fp16, and bf16's row says why."""
    clock = _Clock()
    timer = VariantClock({"fp32": 1.0e-3, "halfprec-fp16": 0.5e-3, "halfprec-bf16": 0.2e-3})

    def timed(fn: object, variant: Variant) -> float:
        clock.now = 60.0  # any timed call: the 50 s are gone
        return timer(fn, variant)  # type: ignore[arg-type]

    run = Benchmark(
        _model(),
        X,
        variants=[FP32, FP16, BF16],
        options=TIMED,
        timer=timed,
        budget=Budget(50.0, clock=clock, pace=lambda: 1.0),
    ).run()
    bf16 = run.result.get("halfprec-bf16")
    assert bf16.status == "skipped" and bf16.note.startswith("not run: 60 s of the 50 s budget")
    assert "halfprec-bf16" not in timer.timed
    assert fastest_variant(run.result).name == "halfprec-fp16"


def test_no_memory_subprocess_starts_once_the_budget_is_spent() -> None:
    """bench measures each row's CPU memory in a subprocess after every timing (BERT-base:
    20-30 s); once the budget is spent none starts, and a warning says why."""
    clock = _Clock()

    def timed(fn: object, variant: Variant) -> float:
        clock.now = 60.0  # any timed call: the 50 s are gone
        return VariantClock({"fp32": 1.0e-3, "halfprec-bf16": 0.5e-3})(fn, variant)  # type: ignore[arg-type]

    run = Benchmark(
        _model(),
        X,
        variants=[FP32, BF16],
        options=BenchConfig(
            warmup=1, runs=3, memory="first", skip_slower_than=None, limit=False, race=None
        ),
        spec="builtin:minilm",  # a spec, so rows would be measured in subprocesses
        timer=timed,
        budget=Budget(50.0, clock=clock, pace=lambda: 1.0),
    ).run()
    assert run.result.budget_s == 50.0
    assert all(r.memory is None for r in run.result.results)
    assert any(
        w.startswith("memory not measured: 60 s of the 50 s time budget were spent")
        for w in run.result.warnings
    )


def test_deploy_names_what_its_budget_left_out_and_keeps_what_it_measured() -> None:
    done = halfprec.deploy(
        _model(),
        X,
        "bf16",
        compile=False,
        bench=BenchConfig(
            warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False, budget_s=1e-3
        ),
        runtimes=(),
    )
    assert done.variant == "fp32" and done.claim is None
    assert "; not run within the time budget: halfprec-bf16 (not run: " in done.summary
    # and fp32 is not timed alone for 3 rounds that rank nothing (BERT-base b8 at load 40:
    # 100 s past its budget)
    assert done.report.get("fp32").timing is None
    assert any(
        w.startswith("fp32 @ batch 8 was not timed alone: not run: ") for w in done.report.warnings
    )


def test_a_measured_compile_estimates_the_next() -> None:
    """Before any compile the estimate is the eager call's calls at CALL_CPU_S each
    (CONV_CALL_CPU_S more where it convolves) and its distinct operations at OP_CPU_S
    each, at the pace now; after one, that compile's own seconds."""
    clock = _Clock()
    budget = Budget(50.0, clock=clock, pace=lambda: 2.0)
    wall = WALL_PER_CPU * 2.0**PACE_POWER
    assert budget.estimate(10).seconds == pytest.approx(10 * (CALL_CPU_S + OP_CPU_S) * wall)
    cpu = 400 * CALL_CPU_S + 10 * OP_CPU_S
    assert budget.estimate(10, 400).seconds == pytest.approx(cpu * wall)
    convolved = budget.estimate(10, 400, convolved=True)
    assert convolved.seconds == pytest.approx((cpu + 400 * CONV_CALL_CPU_S) * wall)
    assert "400 calls at" in convolved.how and "(it convolves)" in convolved.how
    assert budget.skip(FP32.with_compile(), ops=10, rounds_s=lambda: 2.0) is None  # 8 + 2 <= 50
    clock.now = 35.0  # the compile took 30 s, its rounds 5 s
    budget.record(FP32.with_compile(), 30.0)
    why = budget.skip(BF16.with_compile(), ops=10, rounds_s=lambda: 2.0)  # 30 + 2 > 15 left
    assert why is not None and "estimated at 30 s (as fp32+compile's compile took)" in why
    assert budget.skip(BF16, ops=10, rounds_s=lambda: 2.0) is None  # eager: no compile to fit
    assert Budget(None).skip(BF16.with_compile(), ops=10**6, rounds_s=lambda: 1e9) is None
    # the GEMM limit's share: half of the 15 s left over 2 dtypes, never under 1 s
    assert budget.share(2) == pytest.approx(3.75) and Budget(None).share(2) is None
    clock.now = 70.0
    assert budget.share(2) == 1.0
    # once spent, a compile's note says so, not "with -20 s left" (ViT-base at load 20)
    why = budget.skip(BF16.with_compile(), ops=10, rounds_s=lambda: 2.0)
    assert why is not None and why.startswith("not run: 70 s of the 50 s budget were spent")
    with pytest.raises(ValueError, match="budget must be > 0 seconds"):
        Budget(0.0)
    with pytest.raises(ValueError, match="budget_s must be > 0 seconds or None"):
        BenchConfig(budget_s=-1.0)


def test_the_likeliest_winner_is_compiled_first() -> None:
    """halfprec-bf16 eager runs at half fp32's time: compiled, at best 0.5 / 3; fp32
    compiled at best 1 / 3. The budget here holds no compile, and the progress line shows
    which was considered first (before: the report's order, fp32+compile first)."""
    seen: list[str] = []
    timer = VariantClock({"fp32": 1.0e-3, "halfprec-bf16": 0.5e-3})
    variants = [FP32, BF16, FP32.with_compile(), BF16.with_compile()]
    run = Benchmark(
        _model(),
        X,
        variants=variants,
        options=BenchConfig(
            warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False, race=Race()
        ),
        timer=timer,
        progress=lambda _s, _t, label: seen.append(label.split(" @")[0]),
        budget=Budget(50.0, clock=_Clock(), pace=lambda: 1e6),
    ).run()
    assert seen[-3:-1] == ["halfprec-bf16+compile", "fp32+compile"]
    assert all(run.result.get(v.name).status == "skipped" for v in variants[2:])
    assert by_expected_gain([0, 1, 2], [FP32, BF16, FP16], {FP32: 0.3, FP16: 0.1}.get) == [
        2,
        0,
        1,
    ]


def test_a_warm_up_that_spends_the_budget_leaves_the_probe_unrun() -> None:
    """ViT-base b8 at load 20: eager fp32's cold warm-up took 59.9 s of a 50 s budget, and
    the probe 15.3 s more for candidates that could no longer start. The warm-up counts:
    once it has spent the budget, nothing is probed or limited, and the rows say why."""
    clock = _Clock()
    probed: list[torch.dtype] = []

    def probe_timer(fn: object, dtype: torch.dtype) -> float:
        probed.append(dtype)
        return 1e-3

    run = Benchmark(
        _Cold(clock),
        X,
        variants=[FP32, BF16],
        options=BenchConfig(warmup=1, runs=3, memory="none", probe_cache=False, race=None),
        timer=VariantClock({"fp32": 1.0, "halfprec-bf16": 0.5}),
        probe_timer=probe_timer,
        budget=Budget(50.0, clock=clock, pace=lambda: 1.0),
    ).run()
    assert probed == [] and run.result.limits[8] == {}
    assert any(
        w.startswith("the half dtypes were not probed: 100 s of the 50 s")
        for w in run.result.warnings
    )
    assert run.result.get("halfprec-bf16").note.startswith("not run: ")


@pytest.mark.parametrize(
    ("ops", "calls", "convolved", "pace", "measured_s"),
    [
        (51, 233, False, 1.3, 19.5),  # MiniLM b1, quiet (round eighteen's end)
        (49, 408, False, 1.5, 25.8),  # BERT-base b8, quiet
        (51, 233, False, 4.3, 111.7),  # MiniLM b1 at load 4-11 (round nineteen)
        (49, 408, False, 8.0, 326.3),  # BERT-base b8 at load 14-20 (round nineteen)
        (26, 378, True, 10.2, 318.1),  # DeiT-small b4 at load 20-23 (round nineteen)
        (25, 376, True, 9.5, 411.8),  # ViT-base b8 at load 23-26 (round nineteen)
        (25, 376, True, 2.1, 86.9),  # ViT-base b8 at load 3-5 (round nineteen)
        (51, 233, False, 1.5, 35.0),  # MiniLM b1 at load 2-3 (round nineteen)
        (49, 408, False, 2.8, 50.4),  # BERT-base b8 at load 4-5 (round nineteen)
        (49, 617, False, 6.7, 363.3),  # BART at load 13-18 (round twenty)
        (157, 386, True, 3.7, 469.3),  # SegFormer-b0 at load 18 (round twenty)
        (30, 228, True, 5.7, 267.8),  # Whisper-base's encoder at load 15-18 (round twenty)
        (51, 233, False, 3.0, 70.1),  # MiniLM b1 at load 5-8 (round twenty-one)
        (30, 228, True, 3.5, 164.9),  # Whisper-base's encoder at load 8-11
        (49, 408, False, 5.6, 235.8),  # BERT-base b8 at load 11-17
        (26, 193, False, 6.2, 171.3),  # held out of the fit: DistilBERT at load 17
        (43, 181, True, 6.0, 255.9),  # held out of the fit: ConvNeXt-tiny at load 17
    ],
)
def test_the_compile_estimate_is_within_about_half_to_twice_every_measured_compile(
    ops: int, calls: int, convolved: bool, pace: float, measured_s: float
) -> None:
    """Cold fp32 compiles on the 2-core Zen 3 (docs/benchmarks.md, rounds eighteen to
    twenty-one), estimated from eager fp32's calls, distinct operations and convolutions
    and the pace read before them: between 0.55 and 2.2 times the compile. Before, at
    ``max(calls x 0.16, ops x 0.7)`` CPU-s, BERT-base b8 quiet read 2.8 times its compile
    (so MiniLM b1's quiet compile, and its 1.23-1.49x, were no longer tried)."""
    budget = Budget(50.0, clock=_Clock(), pace=lambda: pace)
    estimate = budget.estimate(ops, calls, convolved=convolved).seconds
    assert measured_s * 0.55 <= estimate <= measured_s * 2.2, estimate


def test_the_pace_is_read_once_the_call_s_threads_are_idle() -> None:
    """Read right after eager fp32's call, the pace came out 2.6 on a quiet machine
    (others read 1.3-1.6): the spin waits first. A pace is a positive number of wall
    seconds per CPU-second."""
    start = time.perf_counter()
    assert thread_pace(cpu_s=1e-4, idle_s=0.02) > 0
    assert time.perf_counter() - start >= 0.02


def test_a_budget_from_the_process_start_charges_what_came_before_and_keeps_its_reserve() -> None:
    """``halfprec deploy``'s budget counts from its process's start and keeps its last
    seconds for the write and the exit: 30 s into a 55 s budget with 5 s kept, 20 s are
    left, where a budget from deploy's call would see 55. A candidate that fits in 55 s but
    not in 20 is not started, and its note says what was spent and what is kept."""
    clock = _Clock()
    clock.now = 30.0  # imports and the model's load took 30 s
    call = Budget(55.0, clock=clock, pace=lambda: 1.0)
    process = Budget(55.0, clock=clock, pace=lambda: 1.0, origin=0.0, reserve_s=5.0)
    assert (call.left, process.left) == (55.0, 20.0)
    assert call.skip(BF16, ops=5, rounds_s=lambda: 21.0) is None
    why = process.skip(BF16, ops=5, rounds_s=lambda: 21.0)
    assert why == (
        "not run: 30 s of the 55 s budget were spent (5 s of it kept for after the run), "
        f"and its rounds would take about 21 s more; {LIFT}"
    )
    # a compile whose estimate fits the 20 s left alone, but not with its rounds
    compile_s = process.estimate(5, 20).seconds
    assert compile_s < 20.0
    rounds = 21.0 - compile_s
    assert call.skip(FP32.with_compile(), ops=5, calls=20, rounds_s=lambda: rounds) is None
    why = process.skip(FP32.with_compile(), ops=5, calls=20, rounds_s=lambda: rounds)
    assert why is not None and why.startswith("not compiled within the 55 s budget: its compile")
    assert why.endswith(f"with 20 s left (5 s more kept for after the run); {LIFT}")
    clock.now = 50.0  # into the reserve: nothing more starts, nothing more is probed
    assert process.over and not call.over
    with pytest.raises(ValueError, match="reserve must be >= 0 seconds"):
        Budget(55.0, reserve_s=-1.0)


STARTED = time.perf_counter()  # when pytest imported this module


def test_the_process_start_is_before_anything_it_imported() -> None:
    """The command line's budget counts from the interpreter's start (Linux's /proc):
    before this module was imported. Elsewhere it is now, on the clock given."""
    if not Path("/proc/self/stat").is_file():
        pytest.skip("no /proc here: the start is the call's")
    assert process_start() < STARTED <= time.perf_counter()
    assert process_start(clock=lambda: 1e6) < 1e6  # the clock's reading less the age


def test_the_library_s_deploy_budget_counts_from_its_call_with_nothing_kept() -> None:
    """``deploy()``'s budget counts from the call (deploy's default 50 s) and keeps nothing
    for after it; what was spent before the run is in the report."""
    done = halfprec.deploy(_model(), X, "bf16", compile=False, runtimes=())
    assert done.report.budget_s == 50.0 and done.report.budget_reserve_s == 0.0
    assert 0.0 <= done.report.budget_spent_s <= done.seconds["total"]


class _Compiled(nn.Module):  # a class of its own: dynamo's cache has never seen its forward
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


@pytest.mark.skipif(not can_stop(), reason="no SIGALRM timer on this thread")
def test_a_compile_that_runs_past_the_seconds_left_is_stopped_and_claims_nothing() -> None:
    """An estimate that reads low (Whisper's encoder: 0.65 of its compile) let a compile
    start with too few seconds left; before, it ran to its end and deploy ended past its
    budget by the difference. Here the estimate fits (pace 1e-9) and a microsecond is left
    when torch.compile's first call starts: the compile is stopped there, its row is skipped
    with a note that says so, nothing is claimed for it, and fp32 is the choice. (With
    20 ms left, a compile whose graph the worker's caches already held once beat the timer
    in CI: no dynamo trace takes a microsecond.)"""
    clock = _Clock()

    # an earlier test that left a SIGALRM handler or timer behind would disarm the stop
    assert can_stop(), (signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL))

    def pace() -> float:  # read as the compile is considered: 1 us of the 50 s left then
        clock.now = 50.0 - 1e-6
        return 1e-9

    torch.manual_seed(0)
    run = Benchmark(
        _Compiled().eval(),
        X,
        variants=[FP32, FP32.with_compile()],
        options=BenchConfig(
            warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False, race=None
        ),
        timer=VariantClock({"fp32": 1.0e-3, "fp32+compile": 0.5e-3}),
        budget=Budget(50.0, clock=clock, pace=pace),
    ).run()
    row = run.result.get("fp32+compile")
    assert row.status == "skipped" and row.timing is None, row.note
    assert row.note.startswith("not compiled within the 50 s budget: its compile was stopped")
    assert row.note.endswith(LIFT)
    assert fastest_variant(run.result).name == "fp32"
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL


def _with_runtime(clock: _Clock, ov: Variant) -> Benchmark:
    """fp32 and the runtime target ``ov`` on a 50 s budget read on ``clock`` from 0."""
    return Benchmark(
        _Compiled().eval(),
        X,
        variants=[FP32, ov],
        options=BenchConfig(
            warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False, race=None
        ),
        timer=VariantClock({"fp32": 1.0e-3, ov.name: 0.5e-3}),
        budget=Budget(50.0, clock=clock, origin=0.0),
    )


@pytest.mark.skipif(not can_stop(), reason="no SIGALRM timer on this thread")
def test_a_runtime_conversion_past_the_seconds_left_is_stopped() -> None:
    """A runtime target was built whatever the budget had left: on a Zen 4 with
    AVX512-BF16, OpenVINO's bf16 target of BERT-base b8 was converted after deploy's 50 s
    were spent, and the deploy took 88 s. Now a runtime starts only where its rounds fit,
    and its conversion is stopped once the seconds left are spent: here 2 ms are left
    when the real OpenVINO conversion starts."""
    pytest.importorskip("openvino")
    clock = _Clock()
    clock.now = 50.0 - 2e-3
    ov = Variant("openvino", torch.float32)
    torch.manual_seed(0)
    run = _with_runtime(clock, ov).run()
    row = run.result.get(ov.name)
    assert row.status == "skipped" and row.timing is None, row.note
    assert row.note.startswith("not run: its build was stopped after 0 s"), row.note
    assert row.note.endswith(LIFT)
    assert fastest_variant(run.result).name == "fp32"
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    clock.now = 50.0  # spent: a runtime is not started at all
    note = _with_runtime(clock, ov).run().result.get(ov.name).note
    assert note.startswith("not run: 50 s of the 50 s budget"), note


def test_the_pace_is_the_core_s_speed_times_the_threads_sharing_a_core() -> None:
    """The pace was a spin's wall time over a few milliseconds: on a Zen 4 at load 8 it
    read 0.8 and BERT-base b8's compile took 2.9 times its estimate; on a quiet Zen 3 it
    read 1.6, then 3.2 a minute later. Now it is the core's speed (the spins' CPU time)
    times the 1-minute load average per core, at least 1; the spins' wall time only
    where the system keeps no load average."""
    spins = [(0.8, 0.55), (0.7, 0.5), (0.9, 0.6)]  # (wall, CPU) per reference CPU-second
    assert pace_of(spins, 4.0) == pytest.approx(2.2)  # 8 runnable threads on 2 cores
    assert pace_of(spins, 0.3) == pytest.approx(0.55)  # a quiet, faster core
    assert pace_of(spins, None) == pytest.approx(0.8)
    assert thread_pace(cpu_s=1e-3, idle_s=0.0, load=lambda: 50.0) > thread_pace(
        cpu_s=1e-3, idle_s=0.0, load=lambda: 0.0
    )


def test_a_compile_that_can_be_stopped_starts_where_part_of_its_estimate_fits() -> None:
    """BERT-base b8's quiet compile (26 s) was estimated at 43 s with 30 s left, and never
    started. Where the compile can be stopped at the seconds left (the main thread), it
    starts once STOPPABLE_SHARE of its estimate and its rounds fit; elsewhere (another
    thread: no SIGALRM deadline) the whole estimate must."""
    budget = Budget(50.0, clock=_Clock(), pace=lambda: 1.0)
    ops, calls = 49, 408  # BERT-base's eager call: an estimate of about 24 s at pace 1
    whole = budget.estimate(ops, calls).seconds
    pace = (60.0 / whole) ** (1 / PACE_POWER)
    budget = Budget(50.0, clock=_Clock(), pace=lambda: pace)  # estimated at 60 s

    def skip() -> str | None:
        return budget.skip(FP32.with_compile(), ops, lambda: 2.0, calls)

    assert can_stop() and 60.0 * STOPPABLE_SHARE + 2.0 <= 50.0
    assert skip() is None
    seen: list[str | None] = []
    worker = threading.Thread(target=lambda: seen.append(skip()))
    worker.start()
    worker.join()
    assert seen[0] is not None and "estimated at 60 s" in seen[0], seen
    assert "at least" not in seen[0]
    budget.clock.now = 10.0  # type: ignore[attr-defined]
    why = skip()  # 45 s of the 60 and 2 s of rounds no longer fit in 40
    assert why is not None and "estimated at 60 s" in why and ", at least 45 s" in why, why
