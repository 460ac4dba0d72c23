"""halfprec bench on tiny models: variants, results, memory worker, choice."""

from __future__ import annotations

import gc
import itertools
import json
import weakref
from typing import Any

import pytest
import torch
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.batch import resize_batch
from halfprec.bench.choice import choose_dtype_by_measurement, matmul_slowdown
from halfprec.bench.machine import machine_info
from halfprec.bench.results import BenchResult, VariantResult, fastest_variant
from halfprec.bench.variants import (
    DEFAULT_VARIANTS,
    Variant,
    VariantError,
    build_variant,
    parse_variants,
)
from halfprec.bench.worker import measure_in_subprocess
from halfprec.compare import Tolerance
from halfprec.convert.core import conversion_report
from halfprec.timing import Timing
from support.precision import SEEN, callers_fp32, spy


class Tiny(nn.Module):
    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.fc2 = nn.Linear(64, 8)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.norm(self.fc1(x)))) * self.scale


def _x(rows: int = 4) -> torch.Tensor:
    return torch.randn(rows, 32, generator=torch.Generator().manual_seed(1))


FAST = BenchConfig(warmup=1, runs=3, skip_slower_than=None)  # time every dtype


# -- variants -------------------------------------------------------------------------------
def test_variant_names_round_trip() -> None:
    for v in DEFAULT_VARIANTS:
        assert Variant.parse(v.name) == v
    assert Variant.parse("halfprec-bf16+compile") == Variant("halfprec", torch.bfloat16, True)
    assert Variant.parse("Naive-FP16").name == "naive-fp16"


@pytest.mark.parametrize("bad", ["fp64", "naive", "autocast-fp32", "halfprec-int8", ""])
def test_unknown_variant_names_the_choices(bad: str) -> None:
    with pytest.raises(VariantError, match=r"unknown variant .*use one of: fp32, naive-fp16"):
        Variant.parse(bad)


def test_variant_rejects_inconsistent_dtype() -> None:
    with pytest.raises(ValueError, match="needs fp16 or bf16"):
        Variant("halfprec", torch.float32)
    with pytest.raises(ValueError, match="kind must be one of"):
        Variant("amp", torch.float16)


def test_parse_variants_puts_fp32_first_and_adds_compile_twins() -> None:
    chosen = parse_variants(["halfprec-bf16", "naive-fp16"], compile=True)
    assert [v.name for v in chosen] == [
        "fp32",
        "halfprec-bf16",
        "naive-fp16",
        "halfprec-bf16+compile",
        "naive-fp16+compile",
    ]
    assert [v.name for v in parse_variants(None)] == [v.name for v in DEFAULT_VARIANTS]


def test_build_variant_dtypes_and_original_untouched() -> None:
    model = Tiny()
    naive = build_variant(model, Variant("naive", torch.float16))
    assert naive.fc1.weight.dtype == torch.float16
    assert naive(_x()).dtype == torch.float16  # fp32 inputs cast by the naive caller
    auto = build_variant(model, Variant("autocast", torch.bfloat16))
    assert auto(_x()).dtype == torch.bfloat16  # autocast: fp32 weights, bf16 matmul
    half = build_variant(model, Variant("halfprec", torch.bfloat16))
    report = conversion_report(half)
    assert report is not None and "norm" in report.islands
    assert half.norm.weight.dtype == torch.float32 and half.fc1.weight.dtype == torch.bfloat16
    assert half(_x()).dtype == torch.float32  # outputs cast back
    assert model.fc1.weight.dtype == torch.float32


# -- batches --------------------------------------------------------------------------------
def test_resize_batch_repeats_cuts_and_keeps_channels_last() -> None:
    ids = torch.arange(6).reshape(2, 3)
    grown = resize_batch({"input_ids": ids, "scalar": torch.tensor(1.0)}, 5)
    assert grown["input_ids"].shape == (5, 3)
    assert grown["input_ids"][4].tolist() == ids[0].tolist()
    assert grown["scalar"].dim() == 0
    assert resize_batch((ids,), 1)[0].tolist() == [[0, 1, 2]]
    img = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    out = resize_batch(img, 3)
    assert out.shape == (3, 3, 8, 8) and out.is_contiguous(memory_format=torch.channels_last)


def test_resize_batch_without_tensors_says_so() -> None:
    with pytest.raises(ValueError, match="no tensor with a batch dimension"):
        resize_batch({"n": 3}, 2)


# -- benchmark ------------------------------------------------------------------------------
def test_benchmark_reports_every_variant_with_accuracy() -> None:
    # race=None: every variant gets all 3 rounds (the race may settle a clearly slower one
    # after 2, as it did once on a fast machine, and this test is about the report)
    cfg = BenchConfig(batch_sizes=(1, 8), warmup=1, runs=3, skip_slower_than=None, race=None)
    result = benchmark(Tiny(), _x(), variants=["halfprec-bf16", "naive-fp16"], bench=cfg)
    assert result.batch_sizes == [1, 8]
    assert [r.name for r in result.at(8)] == ["fp32", "halfprec-bf16", "naive-fp16"]
    fp32 = result.get("fp32", 8)
    assert fp32.speedup == pytest.approx(1.0) and fp32.comparison is None
    half = result.get("halfprec-bf16", 8)
    assert half.status == "ok" and half.timing is not None and len(half.timing.samples) == 3
    assert half.throughput == pytest.approx(8 / half.timing.median)
    assert half.model_bytes < fp32.model_bytes
    assert half.comparison is not None and half.comparison.worst_cosine > 0.999
    assert half.comparison.outputs[0].shape == (8, 8)
    assert half.memory is None  # CPU memory needs a MODEL spec (subprocess)
    data = json.loads(json.dumps(result.to_json()))
    row = next(r for r in data["results"] if r["variant"] == "naive-fp16" and r["batch_size"] == 1)
    assert row["dtype"] == "fp16" and row["median_s"] > 0 and 0.99 < row["cosine"] <= 1.0
    assert data["machine"]["torch_version"] == torch.__version__
    assert set(data["auto_choice"]) == {"1", "8"}


def test_benchmark_progress_counts_every_step() -> None:
    seen: list[tuple[int, int, str]] = []
    benchmark(Tiny(), _x(), variants=["naive-bf16"], bench=FAST, progress=lambda *a: seen.append(a))
    assert [s[0] for s in seen] == [0, 1, 2] and seen[-1][1] == 2
    assert seen[1][2] == "naive-bf16 @ batch 4"


def test_inaccurate_variant_fails_tolerance_and_is_never_chosen() -> None:
    # a tolerance no bf16 result can meet (8 significant bits cannot give SQNR 200 dB)
    strict = Tolerance(min_cosine=1.0, min_sqnr_db=200.0)
    result = benchmark(Tiny(), _x(), variants=["halfprec-bf16"], bench=FAST, tolerance=strict)
    half = result.get("halfprec-bf16")
    assert half.comparison is not None and not half.comparison.passed
    assert not half.accurate
    assert fastest_variant(result).name == "fp32"


def _fake(result: BenchResult, name: str, median: float, passed: bool = True) -> VariantResult:
    from halfprec.compare import compare_outputs

    ref = [torch.ones(3)]
    cand = [torch.ones(3) if passed else torch.tensor([1.0, -1.0, 0.0])]
    v = Variant.parse(name)
    r = VariantResult(v, 4, "ok", timing=Timing((median,) * 3), items_per_call=4)
    if v.kind != "fp32":
        r.comparison = compare_outputs(ref, cand, dtype=v.dtype)
    result.results.append(r)
    return r


def test_fastest_variant_picks_fastest_accurate_never_slower_than_fp32() -> None:
    result = BenchResult("m", "cpu", machine_info("cpu"), "samples")
    _fake(result, "fp32", 1.0)
    _fake(result, "halfprec-fp16", 2.0)  # slower than fp32
    assert fastest_variant(result).name == "fp32"
    _fake(result, "halfprec-bf16", 0.5, passed=False)  # fast but out of tolerance
    assert fastest_variant(result).name == "fp32"
    _fake(result, "naive-bf16", 0.3)  # fast and accurate, but not a halfprec variant
    assert fastest_variant(result).name == "fp32"
    assert fastest_variant(result, kinds=("fp32", "naive")).name == "naive-bf16"
    _fake(result, "halfprec-bf16+compile", 0.4)
    assert fastest_variant(result).name == "halfprec-bf16+compile"


def test_choose_dtype_by_measurement_keeps_fp32_when_no_half_variant_is_accurate() -> None:
    exact = Tolerance(min_cosine=None, min_sqnr_db=None, max_rel_error=0.0)  # half never is
    choice = choose_dtype_by_measurement(Tiny(), _x(64), tolerance=exact, bench=FAST)
    assert (choice.dtype, choice.variant, choice.speedup) == (torch.float32, "fp32", 1.0)
    assert choice.reason == (
        "no half variant is faster than fp32 within tolerance here "
        "(halfprec-fp16: out of tolerance; halfprec-bf16: out of tolerance)"
    )
    assert [r.name for r in choice.result.results] == ["fp32", "halfprec-fp16", "halfprec-bf16"]


def test_capped_variant_is_timed_once_and_noted() -> None:
    cfg = BenchConfig(warmup=2, runs=5, max_call_s=1e-9, skip_slower_than=None)
    result = benchmark(Tiny(), _x(), variants=["naive-bf16"], bench=cfg)
    capped = result.get("naive-bf16")
    assert capped.status == "capped" and capped.timing is not None
    assert len(capped.timing.samples) == 1 and "cap" in capped.note
    assert fastest_variant(result, kinds=("fp32", "naive")).name == "fp32"
    # the reference is never capped: one round of fp32 would rank nothing
    fp32 = result.get("fp32")
    assert fp32.status == "ok" and fp32.timing is not None and len(fp32.timing.samples) >= 3
    assert any(w.startswith("fp32 @ batch 4: one call took") for w in result.warnings)


def test_failing_variant_is_reported_not_raised() -> None:
    class NeedsFloat64(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.fc.weight.dtype != torch.float32:
                raise RuntimeError("this model only runs in fp32")
            return self.fc(x)

    result = benchmark(NeedsFloat64(), torch.ones(2, 4), variants=["naive-bf16"], bench=FAST)
    failed = result.get("naive-bf16")
    assert failed.status == "failed" and "only runs in fp32" in failed.note
    assert failed.timing is None and failed.speedup is None


def test_benchmark_config_validation() -> None:
    with pytest.raises(ValueError, match="batch sizes must be >= 1"):
        BenchConfig(batch_sizes=(0,))
    with pytest.raises(ValueError, match="need runs >= 1"):
        BenchConfig(runs=0)


# -- memory worker --------------------------------------------------------------------------
@pytest.mark.slow
def test_memory_worker_failure_is_a_note() -> None:
    use = measure_in_subprocess("no_such_module_xyz:f", Variant.parse("fp32"), 1)
    assert use.method == "failed" and "worker exit" in use.note


def test_skip_slower_than_skips_dtypes_by_a_measured_probe() -> None:
    cfg = BenchConfig(warmup=1, runs=3, skip_slower_than=1e-6)  # every dtype is "too slow"
    result = benchmark(Tiny(), _x(), variants=["halfprec-bf16"], bench=cfg)
    skipped = result.get("halfprec-bf16")
    assert skipped.status == "skipped" and skipped.timing is None
    assert skipped.note.startswith("bf16 matmuls run")
    assert result.get("fp32").status == "ok"
    # never compared with fp32: neither accurate nor inaccurate
    assert skipped.to_json()["accurate"] is None and not skipped.checked
    assert result.get("fp32").to_json()["accurate"] is True


def test_choose_dtype_by_measurement_says_skipped_not_out_of_tolerance() -> None:
    slow = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=1e-6)
    choice = choose_dtype_by_measurement(Tiny(), _x(64), "bf16", bench=slow)
    assert choice.variant == "fp32"
    assert "halfprec-bf16: skipped bf16 matmuls run" in choice.reason
    assert "out of tolerance" not in choice.reason


def test_matmul_slowdown_is_a_positive_ratio() -> None:
    assert matmul_slowdown(torch.bfloat16, shape=(64, 64, 64)) > 0


CALLS: list[torch.dtype] = []


class Recording(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS.append(self.fc.weight.dtype)
        return self.fc(x)


def test_timed_calls_are_interleaved_across_variants() -> None:
    CALLS.clear()
    # no race: under load bf16 can be settled slower after 2 rounds, and this test is
    # about the order of the calls, not their number
    cfg = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, race=None)
    result = benchmark(Recording(), torch.ones(2, 4), variants=["naive-bf16"], bench=cfg)
    assert [len(r.timing.samples) for r in result.results if r.timing] == [3, 3]
    f32, b16 = torch.float32, torch.bfloat16
    # one warm-up call each (in order), then timed rounds alternating between the variants,
    # in the pair's order, then the reverse, and so on (f32 b16 | b16 f32 | f32 b16): each
    # round's sample a block of back-to-back calls of one variant (bench.steady)
    blocks = [dtype for dtype, _ in itertools.groupby(CALLS)]
    assert blocks == [f32, b16, f32, b16, f32, b16]  # a fixed order: 4 of each


class Counting(nn.Module):
    """Counts its copies (``copy.deepcopy`` of a module ends in ``__setstate__``)."""

    copies = 0

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 8)

    def __setstate__(self, state: dict[str, object]) -> None:
        type(self).copies += 1
        super().__setstate__(state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_each_variant_is_built_once_and_reused_at_every_batch_size() -> None:
    Counting.copies = 0
    cfg = BenchConfig(batch_sizes=(1, 4, 8), warmup=1, runs=3, memory="none", skip_slower_than=None)
    result = benchmark(Counting(), _x(), variants=["halfprec-bf16"], bench=cfg)
    assert result.batch_sizes == [1, 4, 8]
    assert all(r.status == "ok" and r.comparison is not None for r in result.results[1::2])
    # halfprec-bf16 once, not once per batch size; fp32 is the caller's model, never copied
    assert Counting.copies == 1


@pytest.mark.slow
def test_a_compiled_variant_compiles_once_for_many_batch_sizes() -> None:
    # ~15 s: the first size compiles static shapes, the second recompiles with a dynamic
    # batch dimension, and the third reuses that graph
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    cfg = BenchConfig(batch_sizes=(2, 4, 8), warmup=1, runs=3, memory="none", skip_slower_than=None)
    result = benchmark(Tiny(), _x(), variants=["fp32+compile"], bench=cfg)
    compiled = [r for r in result.results if r.variant.compiled]
    assert [r.status for r in compiled] == ["ok"] * 3 and all(r.accurate for r in compiled)
    assert counters["stats"]["unique_graphs"] == 2
    assert result.seconds["compile"] == pytest.approx(sum(r.compile_s or 0 for r in compiled))


# -- true fp32 whatever the process set (issue 30) ------------------------------------------
@pytest.fixture
def tf32_by_the_new_api():
    """The process asked for TF32 matmuls through torch's new precision API; reading the
    legacy ``allow_tf32`` flags after that raises "mix of the legacy and new APIs"."""
    node = torch.backends.cuda.matmul
    old = node.fp32_precision
    node.fp32_precision = "tf32"
    try:
        yield node
    finally:
        node.fp32_precision = old


def test_bench_and_deploy_run_after_the_new_tf32_api_was_set(tf32_by_the_new_api) -> None:
    import halfprec

    result = benchmark(Tiny(), _x(), "bf16", bench=FAST, variants=["fp32", "halfprec-bf16"])
    assert [r.status for r in result.results] == ["ok", "ok"]
    done = halfprec.deploy(Tiny(), _x(), "bf16", compile=False, bench=FAST)
    assert done.choice.status == "ok"
    assert tf32_by_the_new_api.fp32_precision == "tf32"  # the caller's setting is kept


# -- verdicts that never overclaim (issue 31) -----------------------------------------------
class RoundClock:
    """A scripted CallTimer: the n-th timed call of a variant takes its n-th time."""

    def __init__(self, times: dict[str, list[float]]) -> None:
        self.times, self.calls = times, dict.fromkeys(times, 0)

    def __call__(self, fn: object, variant: Variant) -> float:
        n = self.calls[variant.name]
        self.calls[variant.name] = n + 1
        return self.times[variant.name][n % len(self.times[variant.name])]


NO_RACE = BenchConfig(warmup=1, runs=5, memory="none", skip_slower_than=None, race=None)


def test_bench_never_chooses_a_variant_whose_spread_straddles_fp32() -> None:
    noisy = RoundClock({"fp32": [1.0] * 5, "halfprec-bf16": [0.5, 1.6, 0.6, 1.5, 0.7]})
    result = benchmark(Tiny(), _x(), "bf16", variants=["halfprec-bf16"], bench=NO_RACE, timer=noisy)
    half = result.get("halfprec-bf16")
    assert half.accurate and half.median_s == 0.7  # faster by the median
    assert fastest_variant(result).name == "fp32"  # but not beyond the spread
    steady = RoundClock({"fp32": [1.0] * 5, "halfprec-bf16": [0.5, 0.6, 0.55, 0.52, 0.7]})
    result = benchmark(
        Tiny(), _x(), "bf16", variants=["halfprec-bf16"], bench=NO_RACE, timer=steady
    )
    assert fastest_variant(result).name == "halfprec-bf16"


def test_bench_warns_when_a_speedup_exceeds_the_eager_gemm_ratio() -> None:
    clock = RoundClock({"fp32": [1.0, 1.1, 0.9], "halfprec-bf16": [1e-4, 1.1e-4, 0.9e-4]})
    cfg = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, race=None)
    result = benchmark(Tiny(), _x(), "bf16", variants=["halfprec-bf16"], bench=cfg, timer=clock)
    half = result.get("halfprec-bf16")
    assert half.efficiency is not None and half.efficiency > 1.0
    above = [w for w in result.warnings if "eager GEMM ratio" in w]
    assert len(above) == 1 and above[0].startswith("halfprec-bf16 @ batch 4: 10000.00x fp32")


# -- the CUDA paths, with CPU proxies (issue 30) --------------------------------------------
class PoolReuse(nn.Module):
    """Returns its output in one of two buffers and uses the other as scratch, as a CUDA
    graph's memory pool does: call k+1 overwrites (here with NaN) the output of call k."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(32, 8)
        self.register_buffer("pool", torch.zeros(2, 4, 8), persistent=False)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, scratch = self.pool[self.calls % 2], self.pool[(self.calls + 1) % 2]
        scratch.fill_(float("nan"))  # the previous call's output
        out.copy_(self.fc(x))
        self.calls += 1
        return out


def test_outputs_that_the_next_call_overwrites_are_compared_as_they_were() -> None:
    # two warm-up calls: the second overwrites the first's output, which is the one compared
    cfg = BenchConfig(warmup=2, runs=3, memory="none", skip_slower_than=None)
    result = benchmark(PoolReuse(), _x(), "bf16", variants=["naive-bf16"], bench=cfg)
    naive = result.get("naive-bf16")
    assert naive.status == "ok" and naive.comparison is not None
    assert naive.accurate and naive.comparison.worst_cosine > 0.99


def _device_without_bf16_compile() -> Any:
    from halfprec.dtypes import DeviceSupport

    return DeviceSupport(
        device="cuda:0",
        name="Tesla T4 (compute capability 7.5)",
        fp16_fast=True,
        bf16_fast=False,
        fp16_runs=True,
        bf16_runs=True,
        features=("sm_75",),
        bf16_compiles=False,
    )


def test_compiled_rows_are_skipped_where_the_device_does_not_compile_the_dtype() -> None:
    from halfprec.bench.runner import Benchmark

    support = _device_without_bf16_compile()
    assert not support.compiles(torch.bfloat16) and support.compiles(torch.float16)
    cfg = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False)
    variants = [Variant("fp32"), Variant("halfprec", torch.bfloat16, compiled=True)]
    run = Benchmark(Tiny(), _x(), variants=variants, options=cfg, support=support).run()
    row = run.result.get("halfprec-bf16+compile")
    assert row.status == "skipped" and row.compile_s is None and row.timing is None
    assert row.note.startswith("torch.compile does not compile bf16 on Tesla T4")


# -- max-autotune where it can pay (issue 31) -----------------------------------------------
AMX = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f")


@pytest.mark.parametrize(
    ("machine", "features", "ratio", "tried"),
    [
        ("AMX: bf16 GEMMs ~4x fp32's", AMX, 4.2, True),
        ("AVX512-BF16 only: no bf16 template", ("avx512_bf16", "avx512f"), 4.4, False),
        ("AVX2 only: bf16 emulated, ~50x slower", (), 0.02, False),
        ("AMX, but noisy or barely faster", AMX, 1.05, False),
        ("AMX, not measured", AMX, None, False),
    ],
)
def test_autotune_is_tried_where_the_machine_gives_it_a_half_template(
    machine: str, features: tuple[str, ...], ratio: float | None, tried: bool
) -> None:
    from halfprec.bench.variants import autotune_pays

    why = autotune_pays(torch.bfloat16, "cpu", ratio, features)
    assert (why is None) == tried, machine
    if machine.startswith("AVX512-BF16"):
        assert why is not None and why.startswith("max-autotune has no bf16 GEMM template")
    assert autotune_pays(torch.bfloat16, "cuda", 4.2, AMX) is not None  # +compile autotunes


def test_an_autotune_row_is_skipped_where_the_probe_finds_half_emulated() -> None:
    from testbed.clocks import ScriptedClock

    emulated = ScriptedClock([0.001], [0.05])  # bf16 GEMMs 50x slower: probed slow
    cfg = BenchConfig(warmup=1, runs=3, memory="none", probe_cache=False)
    result = benchmark(
        Tiny(), _x(), "bf16", variants=["halfprec-bf16+autotune"], bench=cfg, probe_timer=emulated
    )
    row = result.get("halfprec-bf16+autotune")
    assert row.status == "skipped" and "slower than fp32" in row.note and row.compile_s is None
    assert Variant.parse("halfprec-bf16+autotune") == Variant(
        "halfprec", torch.bfloat16, compiled=True, autotune=True
    )


def test_compile_adds_one_autotune_twin_per_halfprec_variant() -> None:
    cfg = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=1e-9)  # all probed slow
    result = benchmark(Tiny(), _x(), "bf16", bench=cfg, compile=True)
    names = [r.name for r in result.results]
    assert names.count("halfprec-bf16+autotune") == 1 and len(names) == len(set(names))


def test_a_cpu_run_names_only_the_cpus_reduced_fp32_backends() -> None:
    cfg = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False)
    node = torch.backends.mkldnn.matmul
    old = node.fp32_precision
    node.fp32_precision = "bf16"
    try:
        result = benchmark(Tiny(), _x(), "bf16", variants=["halfprec-bf16"], bench=cfg)
    finally:
        node.fp32_precision = old
    (note,) = [w for w in result.warnings if "every reference was computed in IEEE" in w]
    assert note.startswith("fp32 was timed as this process runs it (matmul bf16, onednn conv")
    assert "cudnn" not in note.lower()
    assert result.machine.fp32.startswith("matmul bf16, onednn conv ")


class _Spying(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(spy(x))


def test_fp32_is_warmed_and_timed_under_the_callers_settings_and_judged_against_ieee() -> None:
    """The caller computes fp32 matmuls in reduced precision (oneDNN's bf16, CUDA's TF32):
    fp32's warm-up and every timed call run under those settings, as the user's model
    runs, and the reference the candidates are judged against is computed in IEEE fp32.
    The report names the settings; the caller's settings hold again afterwards."""
    seen_by_timer: list[tuple[str, str, str]] = []

    def timer(fn: Any, variant: Variant) -> float:
        b = torch.backends
        seen_by_timer.append(
            (variant.name, b.mkldnn.matmul.fp32_precision, b.cuda.matmul.fp32_precision)
        )
        fn()
        return 0.002 if variant.name == "fp32" else 0.001

    cfg = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False)
    SEEN.clear()
    with callers_fp32(mkldnn_matmul="bf16", cuda_matmul="tf32"):
        result = benchmark(
            _Spying(), _x16(), "bf16", variants=["halfprec-bf16"], bench=cfg, timer=timer
        )
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    fp32_timed = [s[1:] for s in seen_by_timer if s[0] == "fp32"]
    assert fp32_timed and set(fp32_timed) == {("bf16", "tf32")}, seen_by_timer
    fp32_calls = [s[1:] for s in SEEN if s[0] == torch.float32]
    assert ("ieee", "ieee") in fp32_calls  # the reference
    assert fp32_calls.count(("bf16", "tf32")) >= 1 + len(fp32_timed)  # warm-up and timing
    assert result.machine.fp32.startswith("matmul bf16")
    assert "fp32 timed with matmul bf16" in result.machine.summary()
    assert result.get("halfprec-bf16").comparison is not None


def _x16() -> torch.Tensor:
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(2))


# -- at most the reference and one candidate in memory (issue 30) ---------------------------
class Tracked(nn.Module):
    """Keeps a weak reference to each of its instances, copies included (``copy.deepcopy``
    of a module makes one without ``__init__`` and ends in ``__setstate__``)."""

    live: weakref.WeakSet[nn.Module] = weakref.WeakSet()

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.fc2 = nn.Linear(64, 8)
        type(self).live.add(self)

    def __setstate__(self, state: dict[str, object]) -> None:
        super().__setstate__(state)
        type(self).live.add(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


class LiveCount:
    """Counts the live :class:`Tracked` models beside the caller's at every progress step
    and every timed call (``timer``: it calls the timed function, and times it as 1 ms)."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def count(self) -> None:
        self.seen.append(len(Tracked.live) - 1)

    def progress(self, step: int, total: int, label: str) -> None:
        self.count()

    def __call__(self, fn: Any, variant: Variant) -> float:
        fn()
        self.count()
        return 0.001


def test_bench_holds_one_candidate_beside_the_callers_model_at_a_time() -> None:
    # every default variant (all 6 half ones where both dtypes run) at two batch sizes: the
    # old runner held a copy of each, fp32 too, until the run ended (6-7 beside the model)
    gc.collect()
    model = Tracked()
    live = LiveCount()
    cfg = BenchConfig(
        batch_sizes=(2, 4), warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False
    )
    result = benchmark(model, _x(), bench=cfg, progress=live.progress, timer=live)
    timed = [r for r in result.results if r.timing is not None]
    assert len(timed) == len(result.results) >= 2 * 3  # fp32 and every candidate, both sizes
    assert max(live.seen) == 1  # one candidate, while it is timed; fp32 is the model itself
    assert len(Tracked.live) == 1  # and nothing is left after the run


@pytest.mark.slow
def test_a_compiled_candidate_is_let_go_before_the_next_is_built() -> None:
    # ~12 s: two compiles. dynamo keeps its compiled code on the forward's code object;
    # the candidate itself must still be freed when bench releases it
    gc.collect()
    model = Tracked()
    live = LiveCount()
    cfg = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False)
    variants = ["halfprec-bf16+compile", "naive-bf16+compile", "fp32+compile"]
    result = benchmark(model, _x(8), "bf16", variants=variants, bench=cfg, timer=live)
    assert [r.status for r in result.results] == ["ok"] * 4
    assert max(live.seen) == 1  # fp32+compile wraps the caller's model: no copy at all
    gc.collect()
    assert len(Tracked.live) == 1


def test_a_benchmark_without_fp32_is_refused() -> None:
    from halfprec.bench.runner import Benchmark

    with pytest.raises(ValueError, match=r"needs Variant\('fp32'\): every speedup is measured"):
        Benchmark(Tiny(), _x(), variants=[Variant("naive", torch.bfloat16)])
