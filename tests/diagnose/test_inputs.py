"""Input rounding alone: the fp32 model on its inputs rounded to the half dtype."""

from __future__ import annotations

import torch
from rich.console import Console
from torch import nn

from halfprec import diagnose
from halfprec.compare import Tolerance
from halfprec.diagnose.inputs import input_rounding, input_rounding_note
from halfprec.report.diagnose import print_diagnosis
from testbed.heldout import CONTROL, HELDOUT


def _reference(model: nn.Module, batches: list[tuple[torch.Tensor, ...]]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [model(*b) for b in batches]


def test_coordinates_near_40_cannot_be_carried_in_half() -> None:
    model, batches = HELDOUT["geo-coordinates"].build()
    refs = _reference(model, batches)
    bf16 = input_rounding(model, batches, refs, torch.bfloat16, Tolerance.for_dtype(torch.bfloat16))
    fp16 = input_rounding(model, batches, refs, torch.float16, Tolerance.for_dtype(torch.float16))
    assert bf16 is not None and not bf16.passed
    assert fp16 is not None and not fp16.passed
    # bf16 keeps 8 bits of mantissa against fp16's 11: its rounding costs about 18 dB more
    assert fp16.outputs[0].sqnr_db > bf16.outputs[0].sqnr_db + 12
    note = input_rounding_note(bf16)
    assert note is not None and note.startswith("input rounding alone breaks the tolerance")
    assert "bf16" in note and "fp32_inputs" in note
    control, cbatches = HELDOUT[CONTROL].build()
    ok = input_rounding(
        control, cbatches, _reference(control, cbatches), torch.float16, Tolerance()
    )
    assert ok is not None and ok.passed and input_rounding_note(ok) is None


def test_inputs_the_dtype_holds_exactly_are_not_compared() -> None:
    model = nn.Linear(4, 2).eval()
    batches = [(torch.tensor([[0.5, 1.0, -2.0, 4.0]]),), (torch.arange(4).reshape(1, 4),)]
    batches[1] = (batches[1][0].float(),)
    refs = _reference(model, batches)
    assert input_rounding(model, batches, refs, torch.float16, Tolerance()) is None
    ids = [(torch.tensor([[1, 2, 3]]),)]
    emb = nn.Embedding(8, 2).eval()
    assert input_rounding(emb, ids, _reference(emb, ids), torch.float16, Tolerance()) is None


def test_diagnose_says_when_the_inputs_alone_break_it() -> None:
    model, batches = HELDOUT["geo-coordinates"].build()
    diag = diagnose(model, batches, torch.bfloat16)
    assert diag.inputs_break
    assert diag.to_json()["input_rounding"]["passed"] is False
    con = Console(record=True, width=400)
    print_diagnosis(diag, console=con)
    assert "input rounding alone breaks the tolerance" in con.export_text()
    control, cbatches = HELDOUT[CONTROL].build()
    ok = diagnose(control, cbatches, torch.bfloat16)
    assert not ok.inputs_break and ok.input_rounding is not None and ok.input_rounding.passed
