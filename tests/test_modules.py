"""halfprec.modules: the shared facts about a model, each computed in one place."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from halfprec.modules import evaluating, finite_peak, first_line, in_island, model_device, nbytes


def test_model_device_is_the_first_tensor_device_or_cpu() -> None:
    assert model_device(nn.Linear(2, 2, device="meta")) == torch.device("meta")
    assert model_device(nn.ReLU()) == torch.device("cpu")
    only_buffer = nn.Module()
    only_buffer.register_buffer("b", torch.zeros(1, device="meta"))
    assert model_device(only_buffer) == torch.device("meta")


def test_nbytes_counts_parameters_and_buffers_and_tied_tensors_once() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False), nn.BatchNorm1d(10))
    assert nbytes(model) == (40 + 40 + 10 + 10 + 10 + 10) * 4 + 8  # + num_batches_tracked
    model[1].weight = model[0].weight  # tie: the same 10x4 tensor
    assert nbytes(model) == (40 + 10 + 10 + 10 + 10) * 4 + 8
    assert nbytes(model.half()) == (40 + 10 + 10 + 10 + 10) * 2 + 8


@pytest.mark.parametrize(
    ("values", "peak"),
    [
        ([1.0, -7.0, 3.0], 7.0),
        ([1.0, float("inf"), -5.0], 5.0),
        ([float("nan"), 2.0, float("-inf")], 2.0),
        ([float("nan"), float("inf")], 0.0),
        ([], 0.0),
    ],
)
def test_finite_peak_skips_inf_and_nan(values: list[float], peak: float) -> None:
    assert finite_peak(torch.tensor(values)) == peak
    assert finite_peak(torch.tensor(values, dtype=torch.bfloat16)) == peak


def test_finite_peak_works_on_a_tensor_that_requires_grad() -> None:
    assert finite_peak(torch.tensor([-3.0, 2.0], requires_grad=True)) == 3.0


def test_in_island_matches_the_island_its_children_and_the_whole_model() -> None:
    assert in_island("enc", ["enc"]) and in_island("enc.layer.0", ["enc"])
    assert not in_island("encoder", ["enc"]) and not in_island("dec", ["enc"])
    assert in_island("anything.at.all", [""]) and in_island("", [""])
    assert not in_island("enc", [])


def test_first_line_names_the_type_and_the_first_non_blank_line() -> None:
    assert first_line(ValueError("\n  bad value \nmore")) == "ValueError: bad value"
    assert first_line(RuntimeError()) == "RuntimeError"
    assert first_line(KeyError("k")) == "KeyError: 'k'"
    assert first_line(ValueError("x" * 1000)) == "ValueError: " + "x" * 237 + "..."
    words = first_line(ValueError("overflow " * 100))
    assert words.endswith(" overflow...") and len(words) <= len("ValueError: ") + 240


def _flags(model: nn.Module) -> list[bool]:
    return [m.training for m in model.modules()]


def test_evaluating_restores_every_training_flag_before_inside_after() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.Dropout(0.1)))
    model[1].eval()  # a mixed state: it must come back exactly
    before = _flags(model)
    assert before == [True, True, False, True, True]
    with evaluating(model) as inside:
        assert inside is model
        assert _flags(model) == [False] * 5
    assert _flags(model) == before


def test_evaluating_restores_flags_when_the_block_raises() -> None:
    model = nn.Sequential(nn.Dropout(0.5))
    with pytest.raises(RuntimeError, match="boom"), evaluating(model):
        raise RuntimeError("boom")
    assert _flags(model) == [True, True]
