"""Runtime targets in ``deploy``: a runtime wins only when it passes the same fp32 check and
beats the torch choice by its spread; a runtime that cannot run is a note, not a failure."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

import halfprec
from halfprec import BenchConfig, Tolerance
from halfprec.bench.results import BenchResult, fastest_variant
from halfprec.bench.runner import benchmark
from halfprec.bench.runtime_choice import runtime_rows, runtime_variants, with_runtimes
from halfprec.bench.variants import Variant, VariantError, parse_variants
from halfprec.runtimes import RuntimeModule
from halfprec.timing import Timing
from support.export_models import custom, example_inputs, tiny

pytest.importorskip("openvino")


def Block() -> nn.Module:  # noqa: N802 (a model factory, read like the class)
    return tiny()


def _x() -> torch.Tensor:
    return example_inputs()[0]


QUICK = BenchConfig(warmup=1, runs=3, memory="none", limit=False, skip_slower_than=None)
# fp32 rounding between runtimes is ~140 dB SQNR: 200 dB is a check every runtime fails
STRICT = Tolerance(min_sqnr_db=200.0)


def _run(tolerance: Tolerance | None = None) -> BenchResult:
    return benchmark(
        Block(), _x(), "bf16", bench=QUICK, variants=["fp32", "openvino-fp32"], tolerance=tolerance
    )


@pytest.fixture(scope="module")
def measured() -> BenchResult:
    """One real run (each test injects the timings it needs into its rows)."""
    return _run()


def _timed(result: BenchResult, fp32: tuple[float, ...], runtime: tuple[float, ...]) -> None:
    """Injected timings of the real rows (the clocks of a busy machine are not a test):
    one pair, so fp32's calls in it are its row's and the runtime's reference."""
    result.get("fp32").timing = Timing(fp32)
    result.get("openvino-fp32").timing = Timing(runtime)
    result.get("openvino-fp32").reference_timing = Timing(fp32)


def test_a_runtime_faster_by_its_spread_and_within_tolerance_is_chosen(
    measured: BenchResult,
) -> None:
    result = measured
    row = result.get("openvino-fp32")
    assert row.status == "ok" and row.accurate and row.comparison is not None
    # every element of both outputs, like any variant
    assert [o.compared for o in row.comparison.outputs] == [4 * 4, 4 * 16]
    _timed(result, (2.0, 2.1, 1.9, 2.0, 2.2), (1.0, 1.0, 1.1, 0.9, 1.0))
    assert with_runtimes(result, fastest_variant(result)).name == "openvino-fp32"
    assert fastest_variant(result).name == "fp32"  # bench's own choice stays torch's


def test_a_runtime_that_fails_the_check_is_never_chosen_however_fast() -> None:
    result = _run(STRICT)
    row = result.get("openvino-fp32")
    assert row.status == "ok" and not row.accurate  # the same check, failed
    _timed(result, (2.0, 2.1, 1.9, 2.0, 2.2), (1.0, 1.0, 1.1, 0.9, 1.0))
    assert with_runtimes(result, fastest_variant(result)).name == "fp32"


def test_a_runtime_faster_by_median_only_is_too_noisy_to_replace_torch(
    measured: BenchResult,
) -> None:
    result = measured
    # median ratio 1.25x, but two of five rounds say slower: the IQR straddles 1
    _timed(result, (1.0, 1.0, 1.25, 1.3, 2.0), (1.0, 2.0, 1.0, 1.0, 1.0))
    assert result.get("openvino-fp32").median_s < result.get("fp32").median_s  # type: ignore[operator]
    assert with_runtimes(result, fastest_variant(result)).name == "fp32"


@pytest.mark.slow  # an ONNX export and an OpenVINO conversion: ~20 s on 2 busy cores
def test_deploy_with_runtimes_returns_a_module_that_says_its_runtime() -> None:
    done = halfprec.deploy(Block(), _x(), "bf16", compile=False, bench=QUICK, runtimes=["all"])
    names = [r.name for r in done.report.results]
    assert names[:2] == ["fp32", "halfprec-bf16"]
    assert {"openvino-fp32", "onnxruntime-fp32", "openvino-bf16"} <= set(names)
    assert done.to_json()["runtime"] == done.runtime
    if done.choice.variant.runtime:
        assert isinstance(done.model, RuntimeModule) and done.model.runtime == done.runtime
    else:
        assert done.runtime == "torch" and not isinstance(done.model, RuntimeModule)
    with torch.no_grad():  # whatever won answers like the model
        assert halfprec.compare(Block().eval(), done.model, _x()).passed


def test_deploy_with_a_strict_tolerance_keeps_every_runtime_out() -> None:
    done = halfprec.deploy(
        Block(), _x(), "bf16", compile=False, bench=QUICK, runtimes=["openvino"], tolerance=STRICT
    )
    assert not done.report.get("openvino-fp32").accurate
    assert done.variant == "fp32" and done.runtime == "torch"


def test_a_missing_runtime_is_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # what an uninstalled package looks like
    done = halfprec.deploy(Block(), _x(), "bf16", compile=False, bench=QUICK, runtimes=["openvino"])
    row = done.report.get("openvino-fp32")
    assert row.status == "skipped" and row.timing is None
    assert row.note == (
        "openvino-fp32 needs openvino, not installed; install it with: "
        "pip install 'halfprec[openvino]'"
    )
    assert done.variant in ("fp32", "halfprec-bf16")
    # the summary gives a reason: the command line prints only the summary
    assert "; not run here: openvino-bf16, openvino-fp32 (openvino-" in done.summary
    assert "needs openvino, not installed; install it with: pip install" in done.summary


def test_a_default_runtime_that_cannot_run_here_is_a_row_that_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """deploy's default runtimes (runtimes=None): a runtime that cannot compute the half
    dtype here (not installed, or, on a CPU without AVX512-BF16 or AMX, no bf16 in
    OpenVINO's CPU plugin) was left out without a word, so a user could not tell whether
    it had been tried; now it is a skipped row and the summary names it with the reason."""
    monkeypatch.setitem(sys.modules, "openvino", None)  # not installed, on every CPU
    done = halfprec.deploy(Block(), _x(), "bf16", compile=False, bench=QUICK)
    row = done.report.get("openvino-bf16")
    assert row.status == "skipped" and row.timing is None
    assert row.note.startswith("openvino-bf16 needs openvino, not installed")
    assert "; not run here: openvino-bf16 (openvino-bf16: openvino-bf16 needs " in done.summary
    assert [r.name for r in done.report.results if r.variant.runtime] == ["openvino-bf16"]


def test_runtime_variants_follow_the_half_dtypes_and_refuse_unknown_names() -> None:
    assert runtime_variants(["openvino"], [torch.bfloat16]) == [
        Variant("openvino"),
        Variant("openvino", torch.bfloat16),
    ]
    assert runtime_variants(["onnxruntime"], [torch.bfloat16]) == [Variant("onnxruntime")]
    with pytest.raises(ValueError, match=r"runtimes='tensorrt'\): unknown runtime"):
        runtime_variants(["tensorrt"], [])
    with pytest.raises(ValueError, match=r"runtimes='openvino'\): unknown runtime; give a seq"):
        runtime_variants("openvino", [])  # a string is not a sequence of names here


def test_compile_twins_leave_runtime_variants_alone() -> None:
    assert parse_variants(["fp32", "openvino-fp32"], compile=True) == [
        Variant("fp32"),
        Variant("openvino"),
        Variant("fp32", compiled=True),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("onnxruntime-bf16", "onnxruntime-bf16 is not offered: onnxruntime runs fp32"),
        ("openvino-fp32+compile", "openvino-fp32 is compiled by openvino itself; drop \\+compile"),
        ("openvino-fp8", "unknown variant 'openvino-fp8'.*or a runtime: openvino-fp32"),
    ],
)
def test_bad_runtime_variant_names_say_what_is_offered(text: str, message: str) -> None:
    with pytest.raises(VariantError, match=message):
        Variant.parse(text)


@pytest.mark.parametrize(
    "runtime", ["openvino", pytest.param("onnxruntime", marks=pytest.mark.slow)]
)
def test_a_model_a_runtime_cannot_convert_is_a_failed_row_in_one_line(runtime: str) -> None:
    pytest.importorskip("onnxscript")
    x = example_inputs()[0]
    result = benchmark(custom(), x, "bf16", bench=QUICK, variants=["fp32", f"{runtime}-fp32"])
    assert result.get("fp32").status == "ok"
    row = result.get(f"{runtime}-fp32")
    assert row.status == "failed" and row.note.startswith("build: ")
    assert "\n" not in row.note and row.timing is None
    assert "halfprec_tests" in row.note  # the operator it could not take, named
    assert with_runtimes(result, fastest_variant(result)).name == "fp32"


# -- deploy's default race: the runtimes that compute a half dtype on this CPU (issue 31) ---
def _openvino_on(caps: tuple[str, ...]):  # noqa: ANN202 (a fake of runtimes.unavailable)
    """``unavailable`` as on a CPU whose OpenVINO plugin lists ``caps``."""
    names = {torch.bfloat16: "BF16", torch.float16: "FP16", torch.float32: "FP32"}

    def why_not(runtime: str, dtype: torch.dtype, device: object) -> str | None:
        if runtime != "openvino":
            return None
        return None if names[dtype] in caps else f"no {names[dtype]} here"

    return why_not


@pytest.mark.parametrize(
    ("machine", "caps", "tried"),
    [
        ("AMX", ("FP32", "BF16", "FP16"), ["openvino-fp16", "openvino-bf16"]),
        ("AVX512-BF16 only", ("FP32", "BF16"), ["openvino-bf16"]),
        ("AVX2 only", ("FP32",), []),
    ],
)
def test_deploy_tries_openvino_by_default_where_it_computes_half(
    machine: str, caps: tuple[str, ...], tried: list[str]
) -> None:
    from halfprec.bench.runtime_choice import default_runtimes

    found = default_runtimes((torch.float16, torch.bfloat16), "cpu", _openvino_on(caps))
    assert sorted(v.name for v in found) == sorted(tried), machine
    assert default_runtimes((torch.bfloat16,), "cuda") == []  # runtimes run on the CPU


def test_deploy_default_race_includes_openvino_where_this_cpu_has_half() -> None:
    pytest.importorskip("openvino")
    from halfprec.runtimes import unavailable

    bench = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, limit=False)
    done = halfprec.deploy(Block(), _x(), "bf16", compile=False, bench=bench)
    names = [r.name for r in done.report.results]
    why = unavailable("openvino", torch.bfloat16, "cpu")
    row = done.report.get("openvino-bf16")  # timed where it computes bf16, else says why
    assert (row.status == "skipped") == (why is not None) and row.note == (why or row.note)
    assert "openvino-fp32" not in names and "onnxruntime-fp32" not in names
    assert runtime_rows((torch.bfloat16,), "cuda") == []  # runtimes run on the CPU
