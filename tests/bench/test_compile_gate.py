"""The compile gate: a compiled twin is compiled only while its eager twin's measurement
says it can still win (scripted timings, real comparisons; nothing here compiles)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from halfprec import BenchConfig
from halfprec.bench.compile_gate import (
    COMPILE_GAINS,
    GEMM_SLACK,
    CompileGate,
    Twin,
    gemm_share,
)
from halfprec.bench.interleave import Standings
from halfprec.bench.limit import Gemm, GemmLimit, measure_limit
from halfprec.bench.race import Race
from halfprec.bench.results import VariantResult
from halfprec.bench.runner import Benchmark
from halfprec.bench.variants import Variant, compile_note, parse_variants
from halfprec.bench.ways import register, unregister
from halfprec.bench.ways.base import Way
from halfprec.compare import compare_outputs
from halfprec.convert.recipe import Recipe
from halfprec.tolerance import Tolerance
from testbed.clocks import VariantClock

CPU = torch.device("cpu")
X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
TEN = BenchConfig(warmup=1, runs=10, memory="none", skip_slower_than=None, limit=False)
OV = Variant.parse("openvino-bf16")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(16, 16)


HP = Variant.parse("halfprec-bf16")
NAIVE = Variant.parse("naive-bf16")
FP32 = Variant("fp32")


def _row(variant: Variant, passed: bool = True) -> VariantResult:
    ref = torch.linspace(-1, 1, 64)
    out = ref + (0.0 if passed else 0.5) * torch.sin(ref * 40)
    row = VariantResult(variant, 4, "ok")
    row.comparison = compare_outputs([ref], [out], tolerance=Tolerance(min_cosine=0.999))
    assert row.comparison.passed is passed
    return row


def _standings(relative: dict[Variant, list[float]], eligible: set[Variant]) -> Standings:
    return Standings(relative={v: list(s) for v, s in relative.items()}, eligible=eligible)


def test_a_twin_slower_than_the_best_by_more_than_compile_gains_is_not_compiled() -> None:
    gate = CompileGate(CPU, Race())
    gain = COMPILE_GAINS["cpu"][0]
    best = [0.25, 0.27, 0.26]  # halfprec-bf16 eager, relative to fp32 round by round
    s = _standings({HP: best, NAIVE: [0.95, 1.0, 0.97]}, {HP})
    # fp32 (1.0) / 3 = 0.33 > 1.1 x 0.27: even compiled it cannot reach halfprec-bf16
    why = gate.skip(FP32.with_compile(), [Twin(_row(FP32), s)])
    assert why is not None and "halfprec-bf16" in why and f"{gain:g}x" in why
    assert gate.skip(NAIVE.with_compile(), [Twin(_row(NAIVE), s)]) is not None
    # the best eager candidate's own twin is compiled: compiling may make it faster still
    assert gate.skip(HP.with_compile(), [Twin(_row(HP), s)]) is None
    # a twin within what compiling can gain is compiled: 0.55 / 3 < 1.1 x 0.27
    close = _standings({HP: best, NAIVE: [0.55, 0.56, 0.55]}, {HP})
    assert gate.skip(NAIVE.with_compile(), [Twin(_row(NAIVE), close)]) is None
    # +autotune has no bound on CPU (no eager figure): tried whenever accurate
    auto = HP.with_compile(autotune=True)
    s2 = _standings(
        {HP: [0.95, 0.97, 0.96], OV: best},
        {OV},
    )
    assert gate.skip(auto, [Twin(_row(HP), s2)]) is None
    assert gate.skip(HP.with_compile(), [Twin(_row(HP), s2)]) is not None


def test_only_a_loser_by_every_round_is_gated_a_burst_keeps_the_compile() -> None:
    gate = CompileGate(CPU, Race())
    # one round of halfprec-bf16 hit by load (1.2): its slowest round is what fp32 must
    # lose to, so fp32+compile is compiled after all
    s = _standings({HP: [0.25, 1.2, 0.26]}, {HP})
    assert gate.skip(FP32.with_compile(), [Twin(_row(FP32), s)]) is None
    # an inaccurate winner is not eligible: nothing to lose to but fp32
    s = _standings({NAIVE: [0.3, 0.3, 0.3]}, set())
    assert gate.skip(FP32.with_compile(), [Twin(_row(FP32), s)]) is None


def test_an_out_of_tolerance_eager_twin_is_not_compiled_at_any_speed() -> None:
    gate = CompileGate(torch.device("cuda"), Race())  # no gain bound there: accuracy only
    s = _standings({NAIVE: [0.1, 0.1, 0.1]}, set())
    why = gate.skip(NAIVE.with_compile(), [Twin(_row(NAIVE, passed=False), s)])
    assert why is not None and "out of tolerance" in why
    assert (
        gate.skip(FP32.with_compile(), [Twin(_row(FP32), _standings({HP: [0.1] * 3}, {HP}))])
        is None
    )


def test_no_race_no_twin_or_a_twin_that_wins_at_one_size_compiles() -> None:
    s = _standings({HP: [0.2] * 3}, {HP})
    assert CompileGate(CPU, None).skip(FP32.with_compile(), [Twin(_row(FP32), s)]) is None
    gate = CompileGate(CPU, Race())
    assert gate.skip(FP32.with_compile(), []) is None
    assert gate.skip(NAIVE.with_compile(), [Twin(None, s)]) is None  # eager twin not run
    assert gate.skip(FP32.with_compile(), [Twin(_row(FP32), s)]) is not None
    close = _standings({HP: [0.9] * 3}, {HP})  # at the second size fp32 is close
    assert gate.skip(FP32.with_compile(), [Twin(_row(FP32), s), Twin(_row(FP32), close)]) is None


class _NoCompile(Benchmark):
    """The runner as it is, failing the test if it builds a compiled variant."""

    def _build(self, variant: Variant, batch: object) -> nn.Module | VariantResult:  # type: ignore[override]
        assert not variant.compiled, f"{variant.name} was built: the gate should skip it"
        return super()._build(variant, batch)  # type: ignore[arg-type]


def test_the_runner_times_eager_first_and_never_builds_a_twin_that_cannot_win() -> None:
    clock = VariantClock({"fp32": 1.0, "halfprec-bf16": 0.2, "naive-bf16": 0.95})
    # compiled twins listed first: the runner still measures their eager twins before them
    variants = [FP32, FP32.with_compile(), NAIVE.with_compile(), HP, NAIVE]
    run = _NoCompile(_model(), X, variants=variants, options=TEN, timer=clock).run()
    rows = {r.name: r for r in run.result.results}
    assert [r.name for r in run.result.results] == [
        "fp32",
        "halfprec-bf16",
        "naive-bf16",
        "fp32+compile",
        "naive-bf16+compile",
    ]
    for name in ("fp32+compile", "naive-bf16+compile"):
        assert rows[name].status == "skipped" and rows[name].compile_s is None
        assert "not compiled" in rows[name].note and "halfprec-bf16" in rows[name].note
    assert "compile" not in run.result.seconds
    assert clock.timed == {"fp32", "halfprec-bf16", "naive-bf16"}


def test_benchconfig_without_race_keeps_every_twin() -> None:
    gate = Benchmark(_model(), X, variants=[FP32], options=BenchConfig(race=None)).gate
    assert gate.race is None


class _Choosable(Way):
    """A bench-default way that deploy may choose, registered only inside one test."""

    name = "mine"
    summary = "a test way"
    dtypes = (torch.bfloat16,)
    choosable = True
    bench_default = True
    saving = "not saved"

    def build(
        self, model: nn.Module, dtype: torch.dtype, recipe: Recipe, batch: object
    ) -> nn.Module:
        return model


def test_default_compile_set_compiles_only_the_ways_deploy_may_choose() -> None:
    chosen = [v.name for v in parse_variants(None, compile=True, dtypes=(torch.bfloat16,))]
    assert {"fp32+compile", "halfprec-bf16+compile"} <= set(chosen)
    assert {"naive-bf16", "autocast-bf16"} <= set(chosen)  # their eager rows still run
    assert not [n for n in chosen if n.startswith(("naive", "autocast")) and "+" in n]
    note = compile_note(parse_variants(None, compile=True, dtypes=(torch.bfloat16,)))
    assert note == (
        "compiled only the ways deploy may choose; name naive-bf16+compile or "
        "autocast-bf16+compile in --variants to time them"
    )
    register(_Choosable())  # the rule reads the way's ``choosable``, not a list of names
    try:
        assert "mine-bf16+compile" in [v.name for v in parse_variants(None, compile=True)]
        _Choosable.choosable = False
        assert "mine-bf16+compile" not in [v.name for v in parse_variants(None, compile=True)]
    finally:
        _Choosable.choosable = True
        unregister("mine")


class _Recorded(Benchmark):
    """The runner as it is, recording the compiled variants it builds (and compiling none:
    such a build is reported as failed)."""

    built: set[str] = set()

    def _build(self, variant: Variant, batch: object) -> nn.Module | VariantResult:  # type: ignore[override]
        if variant.compiled:
            self.built.add(variant.name)
            return VariantResult(variant, 0, "failed", "build: not compiled in this test")
        return super()._build(variant, batch)  # type: ignore[arg-type]


def test_a_naive_twin_named_in_variants_is_still_built() -> None:
    variants = parse_variants(["fp32", "naive-bf16+compile"], compile=True)
    assert variants == [FP32, NAIVE.with_compile(), FP32.with_compile()]
    named = parse_variants(["fp32", "naive-bf16"], compile=True)  # a named way gets its twin
    assert named == [FP32, NAIVE, FP32.with_compile(), NAIVE.with_compile()]
    run = _Recorded(_model(), X, variants=variants, options=TEN, timer=VariantClock({"fp32": 1.0}))
    result = run.run().result
    assert "naive-bf16+compile" in run.built
    assert result.get("naive-bf16+compile").note == "build: not compiled in this test"
    assert compile_note(variants) is None and compile_note(named) is None


def test_fp32_compiled_unfrozen_gains_at_most_its_call_over_its_gemms() -> None:
    gate = CompileGate(CPU, Race())
    s = _standings({HP: [0.5, 0.52, 0.51]}, {HP})  # halfprec-bf16 eager, ~1.96x fp32
    compiled = FP32.with_compile()
    # by the device's 3x alone fp32+compile could reach 0.33 of eager: it is compiled
    assert gate.skip(compiled, [Twin(_row(FP32), s)]) is None
    # 0.8 of eager fp32's call is GEMMs, which compiled fp32 keeps: at most 1 / 0.8, widened
    # by GEMM_SLACK to 1.5625x, so 1 / 1.5625 = 0.64 > 1.1 x 0.52: it cannot reach halfprec-bf16
    assert gate.gain(compiled, 0.8) == GEMM_SLACK / 0.8 == 1.5625
    why = gate.skip(compiled, [Twin(_row(FP32), s, gemm_share=0.8)])
    assert why is not None and "at most 1.56x" in why and "0.80 of a call in GEMMs" in why
    # a share that only just caps it keeps the compile: 0.93 of a call (1.34x) could not
    # reach 0.52 either, but against a halfprec-bf16 at 0.8 of fp32 it could
    near = _standings({HP: [0.8, 0.82, 0.81]}, {HP})
    assert gate.skip(compiled, [Twin(_row(FP32), near, gemm_share=0.93)]) is None
    # a model mostly outside its GEMMs keeps the device's bound (min(3, 1 / 0.2))
    assert gate.gain(compiled, 0.2) == COMPILE_GAINS["cpu"][0]
    assert gate.skip(compiled, [Twin(_row(FP32), s, gemm_share=0.2)]) is None
    # half twins may prepack their GEMMs when frozen: the share says nothing of them
    assert gate.gain(HP.with_compile(), 0.8) == COMPILE_GAINS["cpu"][0]
    assert gate.gain(compiled.with_compile(autotune=True), 0.8) is None


def test_the_gemm_share_is_the_fastest_gemm_time_over_the_fastest_round() -> None:
    assert gemm_share([0.9, 0.75, None], [1.2, 1.0, 1.5]) == 0.75  # 0.75 / 1.0
    # fastest against fastest: a round slowed by load changes nothing
    assert gemm_share([0.75], [1.0, 3.0]) == 0.75
    assert gemm_share([None], [1.0]) is None
    assert gemm_share([0.75], []) is None
    # GEMMs longer than the whole call: the timings disagree, no bound drawn from them
    assert gemm_share([0.03177], [0.001, 0.002]) is None


def test_measure_limit_reports_the_fastest_fp32_seconds_of_one_model_call() -> None:
    # per call: the warm-up, then round by round (load comes and goes)
    fp32_each = iter([5e-6, 3e-6, 2e-6, 4e-6])

    def device(fn: Callable[[], object], calls: int) -> float:
        out = fn()
        assert isinstance(out, torch.Tensor)
        return calls * (next(fp32_each) if out.dtype == torch.float32 else 1e-6)

    lim = measure_limit({Gemm(1, 16, 16, 16): 3}, torch.bfloat16, runs=3, timer=device)
    assert lim.fp32_s == pytest.approx(3 * 2e-6)  # the fastest round, times the count
    assert lim.to_json()["fp32_s"] == lim.fp32_s


class _Limited(_NoCompile):
    """The runner with an injected GEMM limit: eager fp32 spends ``share`` of a call in
    GEMMs (the limit itself is not timed)."""

    share = 0.8

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        share = self.share

        def limits(shapes: object, most_s: object = None) -> dict[torch.dtype, GemmLimit]:
            return {torch.bfloat16: GemmLimit(torch.bfloat16, 2.0, "gemm", 1, fp32_s=share)}

        self.half.limits = limits  # type: ignore[method-assign,assignment]


def test_the_runner_does_not_compile_fp32_when_its_gemms_cap_the_gain() -> None:
    clock = VariantClock({"fp32": 1.0, "halfprec-bf16": 0.5})
    variants = [FP32, HP, FP32.with_compile()]
    run = _Limited(_model(), X, variants=variants, options=TEN, timer=clock).run()
    row = run.result.get("fp32+compile")
    assert row.status == "skipped" and "at most 1.56x" in row.note
    assert clock.timed == {"fp32", "halfprec-bf16"}


def test_an_accurate_runtime_target_deploy_may_pick_gates_a_twin_that_cannot_beat_it() -> None:
    gate = CompileGate(CPU, Race())
    # OpenVINO bf16 timed at ~2.7x fp32; the race's eligible set holds only torch ways
    s = _standings({HP: [0.5, 0.7, 0.5], OV: [0.37, 0.36, 0.37]}, {HP})
    compiled = FP32.with_compile()
    assert gate.skip(compiled, [Twin(_row(FP32), s, gemm_share=0.74)]) is None
    why = gate.skip(compiled, [Twin(_row(FP32), s, 0.74, frozenset({OV}))])
    assert why is not None and "openvino-bf16" in why
    # halfprec-bf16's twin may still win: 0.5 / 3 is under OpenVINO's rounds
    assert gate.skip(HP.with_compile(), [Twin(_row(HP), s, None, frozenset({OV}))]) is None
