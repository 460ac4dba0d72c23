"""preflight: values the half dtype cannot hold, found without converting."""

from __future__ import annotations

import torch
from torch import nn

from halfprec import Recipe, preflight
from testbed.hazards import HAZARDS


def test_batchnorm_running_var_beyond_fp16_is_found_and_handled_by_convert() -> None:
    model, _ = HAZARDS["batchnorm-var"].build()
    result = preflight(model, recipe="fp16")
    found = [f for f in result.findings if f.kind == "range"]
    assert {f.module for f in found} == {"bn"}
    assert any("running_var" in f.detail for f in found)
    assert all(f.handled for f in found)
    assert not result.forward_checked
    assert preflight(model, recipe="bf16").findings == []


def test_eps_that_rounds_to_zero_in_fp16() -> None:
    model, _ = HAZARDS["eps-1e-12"].build()
    result = preflight(model, recipe="fp16")
    [eps] = [f for f in result.findings if f.kind == "eps"]
    assert eps.module == "norm" and eps.value == 1e-12
    assert not eps.handled and eps in result.problems
    assert "is 0 in fp16" in eps.detail
    layer_norm = preflight(nn.Sequential(nn.LayerNorm(4, eps=1e-12)), recipe="fp16")
    assert [f.handled for f in layer_norm.findings] == [True]  # a default fp32 island
    assert preflight(model, recipe="bf16").findings == []


def test_fill_constants_found_during_a_forward_with_module_and_line() -> None:
    model, batches = HAZARDS["fill-1e9"].build()
    assert not [f for f in preflight(model, recipe="fp16").findings if f.kind == "fill"]
    result = preflight(model, batches, "fp16")
    fills = [f for f in result.findings if f.kind == "fill"]
    assert {f.module for f in fills} == {"layers.0.attn.core", "layers.1.attn.core"}
    assert all(f.value == -1e9 for f in fills)
    assert all(f.location and "hazards.py" in f.location for f in fills)
    assert result.forward_checked
    assert not [f for f in preflight(model, batches, "bf16").findings if f.kind == "fill"]


def test_fills_that_convert_saturates_are_handled_by_the_recipe() -> None:
    """Issue 34: preflight said "convert handles it: no" (exit 1) for a fill that convert
    saturates by default. handled and recipe_field now come from convert with the recipe."""
    model, batches = HAZARDS["fill-1e9"].build()
    fills = [f for f in preflight(model, batches, "fp16").findings if f.kind == "fill"]
    assert fills and all(f.handled and f.recipe_field == "saturate_fills" for f in fills)
    assert all("convert saturates it" in f.detail for f in fills)
    assert not preflight(model, batches, "fp16").problems
    off = Recipe(dtype="fp16", saturate_fills=False)
    fills = [f for f in preflight(model, batches, off).findings if f.kind == "fill"]
    assert fills and not any(f.handled or f.recipe_field for f in fills)
    assert all("use torch.finfo(x.dtype).min" in f.detail for f in fills)
    island = Recipe(dtype="fp16", saturate_fills=False, keep_fp32=("layers.0",))
    answers = {
        f.module: (f.handled, f.recipe_field)
        for f in preflight(model, batches, island).findings
        if f.kind == "fill"
    }
    assert answers == {
        "layers.0.attn.core": (True, "keep_fp32"),
        "layers.1.attn.core": (False, None),
    }


def test_eps_handled_only_where_the_recipe_keeps_the_norm_in_fp32() -> None:
    layer_norm = nn.Sequential(nn.LayerNorm(4, eps=1e-12))
    [kept] = preflight(layer_norm, recipe="fp16").findings
    assert (kept.handled, kept.recipe_field) == (True, "norm_islands")
    [half] = preflight(layer_norm, recipe=Recipe(dtype="fp16", norm_islands=False)).findings
    assert (half.handled, half.recipe_field) == (False, None)


def test_finfo_float32_min_fill_is_found() -> None:
    model, batches = HAZARDS["fill-finfo-min"].build()
    fills = [f for f in preflight(model, batches, "fp16").findings if f.kind == "fill"]
    assert fills and all(f.value == torch.finfo(torch.float32).min for f in fills)
    assert fills[0].module == "layers.0.attn"


class _IntFill(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        big = torch.full((2,), -(10**10), dtype=torch.long)
        return x + big.sum().float() * 0


def test_fills_of_integer_tensors_and_plain_attributes() -> None:
    result = preflight(_IntFill(), torch.ones(2), "fp16")
    assert result.findings == []
    m = nn.Linear(2, 2)
    m.offset = torch.tensor([1e6, 0.0])  # plain attribute, not a buffer
    [f] = preflight(m, recipe="fp16").findings
    assert f.kind == "range" and "attribute offset" in f.detail
