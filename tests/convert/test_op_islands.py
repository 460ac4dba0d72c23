"""Op-level fp32 islands (halfprec.convert.op_islands): which values fit the half range, how
an island's ops are found by ordinal or by site, how carried fp32 values meet half ones,
and what OpRef accepts."""

from __future__ import annotations

import inspect
import re
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import nn

from halfprec import Recipe, convert
from halfprec.convert.op_islands import OpRef, fits, with_ordinals
from halfprec.dtypes import overflow_bound

HALVES = [torch.float16, torch.bfloat16]
# the op islands alone: no op policy (it computes exp in fp32 anyway), inputs cast to half
RAW = Recipe("fp16", fp32_ops=(), fp32_inputs=False, fp32_params_up_to=0)


def _exp(ordinal: int | None = None, occurrence: int = 0, line: int = 1) -> OpRef:
    return OpRef("", "exp", f"test_op_islands.py:{line}", occurrence, ordinal=ordinal)


def _islands(model: nn.Module, *refs: OpRef, recipe: Recipe = RAW) -> nn.Module:
    return convert(model.eval(), replace(recipe, op_islands=refs))


def _run(model: nn.Module, *args: Any) -> Any:
    with torch.inference_mode():
        return model(*args)


@pytest.mark.parametrize("dtype", HALVES)
def test_a_value_fits_while_its_cast_stays_finite(dtype: torch.dtype) -> None:
    top = torch.finfo(dtype).max
    assert fits(torch.tensor([-top, top]), dtype)
    bound = torch.tensor(overflow_bound(dtype))  # max plus half an ulp: the cast gives inf
    below = torch.nextafter(bound, torch.tensor(0.0))  # rounds down to max
    assert fits(below.reshape(1), dtype) and fits(-below.reshape(1), dtype)
    assert not fits(bound.reshape(1), dtype) and not fits(-bound.reshape(1), dtype)


def test_empty_tensors_and_non_finite_values_fit() -> None:
    """inf and NaN flow through half as they are: only a finite value out of range counts."""
    assert fits(torch.empty(0), torch.float16)
    assert fits(torch.tensor([float("inf"), float("-inf"), float("nan"), 1.0]), torch.float16)
    assert not fits(torch.tensor([float("inf"), 7e4]), torch.float16)


class _TwoExps(nn.Module):
    """Two calls of ``exp`` and a ``cat`` that mixes their results with a half input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.exp(x[0]), torch.exp(x[1]), x[2]])


BIG = torch.tensor([[12.0], [12.0], [1.0]])  # exp(12) = 162755: past fp16's 65504


@pytest.mark.parametrize("ordinal", [0, 1])
def test_an_ordinal_names_one_call_of_its_op_and_no_other(ordinal: int) -> None:
    out = _run(_islands(_TwoExps(), _exp(ordinal)), BIG)
    assert out.dtype == torch.float32
    finite = torch.isfinite(out).tolist()
    assert finite == [ordinal == 0, ordinal == 1, True]  # the other exp ran in fp16: inf
    torch.testing.assert_close(out[ordinal : ordinal + 1], BIG[0].exp())


def test_carried_values_stay_fp32_where_one_of_them_does_not_fit() -> None:
    """``cat`` meets two carried fp32 values and a half one: exp(1) fits fp16, exp(12) does
    not, so all of them go fp32 (casting to half would turn exp(12) into inf)."""
    x = torch.tensor([[1.0], [12.0], [1.0]])
    out = _run(_islands(_TwoExps(), _exp(0), _exp(1)), x)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.cat([x[0].exp(), x[1].exp(), x[2]]))


class _Loop(nn.Module):
    """One ``exp`` call site that runs once per row."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = []
        for row in x:
            out.append(torch.exp(row))  # <- site
        return torch.cat(out)


def _site_line(cls: type) -> int:
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, text in enumerate(lines) if "# <- site" in text)


@pytest.mark.parametrize("occurrence", [0, 1])
def test_a_site_ref_names_one_occurrence_of_its_line(occurrence: int) -> None:
    """A ref without an ordinal is found by its line and by how often that line ran."""
    ref = _exp(occurrence=occurrence, line=_site_line(_Loop))
    out = _run(_islands(_Loop(), ref), BIG)
    assert torch.isfinite(out).tolist() == [occurrence == 0, occurrence == 1, True]


def test_a_ref_with_an_ordinal_is_found_by_counting_alone() -> None:
    """Its location and occurrence (here: the first row's) are not looked up at all."""
    ref = _exp(ordinal=1, occurrence=0, line=_site_line(_Loop))
    out = _run(_islands(_Loop(), ref), BIG)
    assert torch.isfinite(out).tolist() == [False, True, True]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"op": "_foo"}, "OpRef.op '_foo': private ops are never op islands"),
        ({"op": ""}, "OpRef needs a module name and an op name"),
        ({"location": "m.py"}, "OpRef needs a 'file.py:line' location, got 'm.py'"),
        ({"location": "m.py:abc"}, "OpRef needs a 'file.py:line' location, got 'm.py:abc'"),
        ({"location": ":"}, "OpRef needs a 'file.py:line' location, got ':'"),
        ({"occurrence": -1}, "OpRef.occurrence must be an int >= 0, got -1"),
        ({"occurrence": True}, "OpRef.occurrence must be an int >= 0, got True"),
        ({"ordinal": -1}, "OpRef.ordinal must be an int >= 0, got -1"),
        ({"ordinal": 1.0}, "OpRef.ordinal must be an int >= 0, got 1.0"),
    ],
)
def test_a_bad_op_ref_is_refused_by_name(fields: dict[str, Any], message: str) -> None:
    given = {"module": "", "op": "exp", "location": "m.py:1", **fields}
    with pytest.raises(ValueError, match=re.escape(message)):
        OpRef(**given)
    with pytest.raises(ValueError, match=re.escape(message)):
        OpRef.from_json(given)


def test_op_ref_json_needs_the_three_names_and_no_other_key() -> None:
    with pytest.raises(ValueError, match="an op island is an object with module, op and location"):
        OpRef.from_json({"module": "", "op": "exp"})
    extra = {"module": "", "op": "exp", "location": "m.py:1", "line": 3, "Kind": "fp32"}
    with pytest.raises(ValueError, match=re.escape("has unknown keys ['Kind', 'line']")):
        OpRef.from_json(extra)


def test_with_ordinals_fills_in_found_ordinals_and_keeps_the_ones_a_ref_has() -> None:
    located, other = _exp(), _exp(line=2)
    counted = _exp(ordinal=5, line=3)
    found = {located.site: 2, counted.site: 7}
    assert with_ordinals([located, other, counted], found) == (
        replace(located, ordinal=2),
        other,
        counted,
    )
