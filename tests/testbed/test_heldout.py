"""The held-out hazard set (testbed.heldout) and its scoring (heldout_run): every
model runs in fp32, and every hazard really breaks naive fp16 (the control does not)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from halfprec import Recipe, compare, convert
from halfprec.batch import call
from halfprec.dtypes import parse_dtype
from halfprec.tree import flatten
from testbed.heldout import CONTROL, HELDOUT
from testbed.heldout_run import Autocast, NaiveHalf, markdown, run, score

HAZARDS = [n for n in HELDOUT if n != CONTROL]
# naive .to(float16) of the FNO's complex weights warns that it drops their imaginary part
pytestmark = pytest.mark.filterwarnings("ignore:Casting complex values to real")


def _outputs(model: torch.nn.Module, batches: list[Any]) -> list[dict[str, torch.Tensor]]:
    with torch.inference_mode():
        return [flatten(call(model, b)) for b in batches]


def test_the_set_is_large_enough_and_has_one_control() -> None:
    assert len(HAZARDS) >= 12
    assert CONTROL in HELDOUT


@pytest.mark.parametrize("name", list(HELDOUT))
def test_runs_in_fp32_with_finite_outputs_and_is_seeded(name: str) -> None:
    hazard = HELDOUT[name]
    model, batches = hazard.build()
    assert len(batches) >= 2
    assert not model.training
    model.get_submodule(hazard.culprit)  # the culprit is a module of the model
    first = _outputs(model, batches)
    for out in first:
        assert out, f"{name}: no tensor outputs"
        for path, t in out.items():
            assert not t.is_floating_point() or torch.isfinite(t).all(), f"{name}: {path}"
    again = _outputs(*hazard.build())
    for a, b in zip(first, again, strict=True):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), f"{name} is not deterministic"


@pytest.mark.parametrize("name", list(HELDOUT))
def test_naive_fp16_fails_on_every_hazard_and_passes_the_control(name: str) -> None:
    model, batches = HELDOUT[name].build()
    verdict = score("naive", model, batches, torch.float16)
    assert verdict.passed == (name == CONTROL), verdict.reason


@pytest.mark.parametrize("name", [n for n, h in HELDOUT.items() if h.prevented_by_convert])
def test_convert_defaults_pass_where_the_hazard_says_so(name: str) -> None:
    model, batches = HELDOUT[name].build()
    verdict = score("convert", model, batches, torch.float16)
    assert verdict.passed, verdict.reason


def test_a_raising_variant_fails_and_keeps_the_error() -> None:
    model, batches = HELDOUT["cdist-prototypes"].build()
    verdict = score("naive", model, batches, torch.float16)
    assert not verdict.passed and verdict.raised
    assert "cdist" in verdict.reason and "Half" in verdict.reason


def test_autocast_computes_the_fp32_list_in_fp32() -> None:
    # torch.autocast runs cdist in fp32 (its fp32 list), so the prototypes pass there
    model, batches = HELDOUT["cdist-prototypes"].build()
    assert score("autocast", model, batches, torch.float16).passed


def test_scoring_leaves_the_callers_model_unchanged() -> None:
    model, batches = HELDOUT["fft-complex"].build()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for variant in ("naive", "autocast", "convert"):
        score(variant, model, batches, torch.float16)
    after = model.state_dict()
    assert all(after[k].dtype == v.dtype and torch.equal(after[k], v) for k, v in before.items())


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_halting_hand_off_breaks_at_the_hand_off_and_only_there(dtype: str) -> None:
    """Islands on the halting node, on its sibling or on both fail (the node's output is
    narrowed to 1.0); the node handing its output on in fp32 passes, as does the whole
    step (its MLP is 99% of the FLOPs). Autocast and convert's defaults both fail."""
    model, batches = HELDOUT["halting-handoff"].build()

    def passes(**recipe: Any) -> bool:
        return compare(model, convert(model, Recipe(dtype, **recipe)), batches).passed

    for keep in (("step.halt",), ("step.going",), ("step.halt", "step.going")):
        assert not passes(keep_fp32=keep), keep
    assert passes(keep_fp32=("step.halt",), fp32_outputs=("step.halt",))
    assert passes(keep_fp32=("step",))
    half = parse_dtype(dtype)
    assert not score("autocast", model, batches, half).passed
    assert not score("convert", model, batches, half).passed


def test_naive_half_casts_floating_inputs_and_keeps_integer_ones() -> None:
    model, batches = HELDOUT["rope-positions"].build()
    seen: list[torch.dtype] = []
    half = NaiveHalf(model, torch.bfloat16)
    half.model.rotary.register_forward_pre_hook(lambda m, args: seen.extend(a.dtype for a in args))
    with torch.inference_mode():
        half(*batches[0])
    assert seen[:2] == [torch.bfloat16, torch.int64]
    assert next(model.parameters()).dtype == torch.float32


def test_autocast_variant_runs_the_fp32_model_under_autocast() -> None:
    model, batches = HELDOUT[CONTROL].build()
    out = Autocast(model, torch.bfloat16)(*batches[0])
    assert out.dtype == torch.bfloat16  # the Linear ran in bf16
    assert next(model.parameters()).dtype == torch.float32


def test_unknown_variant_names_the_choices() -> None:
    model, batches = HELDOUT[CONTROL].build()
    with pytest.raises(ValueError, match="naive, autocast, convert, tune, got 'amp'"):
        score("amp", model, batches, torch.float16)


def test_markdown_has_a_row_per_hazard_and_totals_per_dtype() -> None:
    runs = [
        run(HELDOUT[n], (torch.float16, torch.bfloat16), ("naive", "autocast"))
        for n in ("linalg-solve", CONTROL)
    ]
    table = markdown(runs)
    assert "| hazard | naive fp16 | naive bf16 | autocast fp16 | autocast bf16 |" in table
    assert "| linalg-solve | FAIL (raises) | FAIL (raises) | PASS | PASS |" in table
    assert f"| {CONTROL} | PASS | PASS | PASS | PASS |" in table
    assert "- fp16: naive 1/2, autocast 2/2" in table
    assert "- bf16: naive 1/2, autocast 2/2" in table
    assert "linalg-solve, naive fp16: batch 0: the half model raised NotImplementedError" in table


class Squares(torch.nn.Module):
    """(1000 * x)^2 / 1e6 by plain multiplications: fine in fp16 while |x| < 0.25."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        torch.nn.init.eye_(self.lin.weight)
        torch.nn.init.zeros_(self.lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x) * 1000.0
        return (y * y) / 1e6


def test_tune_is_tuned_on_batch_0_and_judged_on_every_batch() -> None:
    model = Squares().eval()
    g = torch.Generator().manual_seed(0)
    small = (torch.rand(4, 8, generator=g) * 0.1,)  # products up to 1e4: fit fp16
    large = (torch.rand(4, 8, generator=g) * 4.0,)  # products up to 1.6e7: inf in fp16
    assert score("naive", model, [small], torch.float16).passed
    on_first = score("tune", model, [small], torch.float16)
    assert on_first.passed and on_first.islands is not None  # a recipe, judged on batch 0
    verdict = score("tune", model, [small, large], torch.float16)
    assert not verdict.passed and not verdict.raised
    assert "inf/NaN" in verdict.reason


# autocast keeps the Poincare embeddings fp32; convert makes every embedding table half (for
# a language model's memory), and half cannot hold |u|^2 within 1e-4 of 1: a known gap
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", list(HELDOUT))
def test_convert_defaults_are_never_worse_than_autocast(name: str, dtype: torch.dtype) -> None:
    """Issue 21: wherever torch.autocast passes a held-out hazard, convert's defaults do."""
    model, batches = HELDOUT[name].build()
    autocast = score("autocast", model, batches, dtype)
    converted = score("convert", model, batches, dtype)
    assert converted.passed or not autocast.passed, converted.reason


BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "heldout.py"


def _benchmark(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", [str(BENCHMARK), *args])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts tests/ on it
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(BENCHMARK), run_name="__main__")
    return int(exit_info.value.code or 0)


def test_benchmark_prints_the_table_and_totals(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("--only", f"linalg-solve,{CONTROL}", "--variants", "naive", "--dtypes", "fp16")
    assert _benchmark(monkeypatch, *args) == 0
    out = capsys.readouterr().out
    assert "| hazard | naive fp16 |" in out
    assert "| linalg-solve | FAIL (raises) |" in out
    assert "- fp16: naive 1/2" in out


def test_benchmark_rejects_an_unknown_variant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _benchmark(monkeypatch, "--variants", "naive,amp") == 2
    err = capsys.readouterr().err
    assert "unknown variant amp; choose from naive, autocast, convert, tune" in err


@pytest.mark.parametrize("name", list(HELDOUT))
def test_tune_passes_every_held_out_hazard_in_fp16(name: str) -> None:
    """Issue 21: tuned on batch 0, judged on every batch; its fp32 share of FLOPs is kept,
    and is at most 1% where op islands alone fix the model (gram-overflow's matmul was an
    fp32 island, 22.9%: it is a scaled half one now)."""
    model, batches = HELDOUT[name].build()
    verdict = score("tune", model, batches, torch.float16)
    assert verdict.passed, verdict.reason
    assert verdict.islands is not None
    if verdict.islands and not any(i.startswith("module ") for i in verdict.islands):
        assert verdict.fp32_flops_share is not None and verdict.fp32_flops_share <= 0.01
