"""The compiler's one-time setup runs in the background from the first compiled
candidate's build, and never while a call is timed (scripted timings; nothing compiles)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch
from torch import nn

from halfprec import BenchConfig
from halfprec.batch import Batch
from halfprec.bench.prewarm import Prewarm, compiler_setup
from halfprec.bench.results import VariantResult
from halfprec.bench.runner import Benchmark
from halfprec.bench.variants import Variant

X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
TEN = BenchConfig(warmup=1, runs=10, memory="none", skip_slower_than=None, limit=False)
FP32 = Variant("fp32")


class _Setup:
    """A setup that takes ``seconds`` and records when and in which thread it ran."""

    def __init__(self, seconds: float = 0.3) -> None:
        self.seconds, self.calls = seconds, 0
        self.span: tuple[float, float] = (0.0, 0.0)
        self.thread = ""

    def __call__(self) -> None:
        self.calls += 1
        self.thread = threading.current_thread().name
        start = time.perf_counter()
        time.sleep(self.seconds)
        self.span = (start, time.perf_counter())


class _Stamps:
    """Scripted call times that record when each variant's timed calls happened."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.at = seconds, list[tuple[str, float]]()

    def __call__(self, fn: Callable[[], object], variant: Variant) -> float:
        fn()
        self.at.append((variant.name, time.perf_counter()))
        return self.seconds[variant.name]


class _Uncompiled(Benchmark):
    """The runner as it is, building a compiled candidate as its eager twin (no compile)."""

    def _build(self, variant: Variant, batch: Batch) -> nn.Module | VariantResult:
        return super()._build(Variant(variant.kind, variant.dtype), batch)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(16, 16)


def test_the_setup_starts_at_the_compiled_build_and_ends_before_its_timing() -> None:
    setup = _Setup()
    clock = _Stamps({"fp32": 1.0, "halfprec-bf16": 0.5, "fp32+compile": 0.9})
    variants = [FP32, Variant.parse("halfprec-bf16"), FP32.with_compile()]
    run = _Uncompiled(_model(), X, variants=variants, options=TEN, timer=clock, prewarm=setup)
    result = run.run().result
    assert result.get("fp32+compile").status == "ok"
    assert setup.calls == 1 and setup.thread == "halfprec-prewarm"
    start, end = setup.span
    assert not [name for name, t in clock.at if start < t < end]  # nothing timed beside it
    eager = [t for name, t in clock.at if name == "halfprec-bf16"]
    compiled = [t for name, t in clock.at if name == "fp32+compile"]
    assert max(eager) <= start  # started with the compiled candidate's build, not before
    assert compiled and end <= min(compiled)  # and joined before its first timed call


def test_no_compiled_candidate_runs_no_setup() -> None:
    setup, clock = _Setup(0.0), _Stamps({"fp32": 1.0, "halfprec-bf16": 0.5})
    variants = [FP32, Variant.parse("halfprec-bf16")]
    Benchmark(_model(), X, variants=variants, options=TEN, timer=clock, prewarm=setup).run()
    assert setup.calls == 0


def test_a_setup_runs_once_and_one_that_raises_is_dropped() -> None:
    setup = _Setup(0.05)
    warm = Prewarm(setup)
    warm.start()
    warm.start()
    warm.join()
    assert setup.calls == 1 and warm.started

    def broken() -> None:
        raise RuntimeError("no compiler here")

    failing = Prewarm(broken)
    failing.start()
    failing.join()  # no error: the compile meets it itself, where it always did
    idle = Prewarm(None)
    idle.start()
    idle.join()
    assert not idle.started


def test_the_cpu_setup_is_inductors_vector_isa_check_and_other_devices_have_none() -> None:
    from torch._inductor import cpu_vec_isa

    assert compiler_setup(torch.device("cpu")) is cpu_vec_isa.valid_vec_isa_list
    assert compiler_setup(torch.device("cuda")) is None
    assert compiler_setup(torch.device("meta")) is None
