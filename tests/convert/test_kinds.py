"""What kind of module a conversion meets (halfprec.convert.kinds): the default fp32
islands, the modules whose weights feed a GEMM or a lookup, and the small tensors that
stay fp32."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from halfprec.convert.kinds import (
    DEFAULT_ISLAND_TYPES,
    is_default_island,
    is_gemm_module,
    small_tensors,
)


def _names(model: nn.Module, ids: set[int]) -> list[str]:
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return sorted(name for name, t in tensors.items() if id(t) in ids)


@pytest.mark.parametrize(
    "norm",
    [
        nn.BatchNorm1d(4),
        nn.BatchNorm2d(4),
        nn.SyncBatchNorm(4),
        nn.LayerNorm(4),
        nn.GroupNorm(2, 4),
        nn.InstanceNorm1d(4),
        nn.InstanceNorm3d(4),
        nn.LocalResponseNorm(2),
        nn.RMSNorm(4),
    ],
    ids=lambda m: type(m).__name__,
)
def test_every_torch_norm_layer_is_a_default_island_by_type_even_as_the_root(
    norm: nn.Module,
) -> None:
    assert isinstance(norm, DEFAULT_ISLAND_TYPES)
    assert is_default_island(norm) and is_default_island(norm, root=True)


def _named(name: str, base: type[nn.Module] = nn.Identity) -> nn.Module:
    return type(name, (base,), {})()


@pytest.mark.parametrize(
    "name", ["LlamaRMSNorm", "T5LayerNorm", "RmsNorm", "FrozenBatchNorm2d", "Group_Norm"]
)
def test_a_norm_like_class_name_makes_a_default_island(name: str) -> None:
    assert is_default_island(_named(name))
    assert not is_default_island(_named(name), root=True)  # the root only by type


@pytest.mark.parametrize("name", ["LayerNormBlock", "NormLayer", "BatchNorm2dWrapper"])
def test_a_class_name_that_only_contains_a_norm_is_no_island(name: str) -> None:
    assert not is_default_island(_named(name))


def test_a_scripted_norm_is_a_default_island_by_its_original_name() -> None:
    scripted = torch.jit.script(nn.BatchNorm2d(3))
    assert not isinstance(scripted, DEFAULT_ISLAND_TYPES)
    assert is_default_island(scripted)


@pytest.mark.parametrize(
    "module",
    [
        nn.Linear(2, 2),
        nn.Bilinear(2, 2, 2),
        nn.Conv1d(2, 2, 1),
        nn.ConvTranspose2d(2, 2, 1),
        nn.MultiheadAttention(4, 2),
        nn.LSTM(2, 2),
        nn.GRU(2, 2),
        nn.RNN(2, 2),
        _named("Conv1D", nn.Module),  # transformers' GPT-2 Conv1D, by class name
        _named("MyConv", type("Conv1D", (nn.Module,), {})),  # a subclass of one
    ],
    ids=lambda m: type(m).__name__,
)
def test_modules_whose_weights_feed_a_gemm(module: nn.Module) -> None:
    assert is_gemm_module(module) and is_gemm_module(module, lookups=False)


def test_lookups_count_as_gemm_modules_unless_asked_not_to() -> None:
    for table in (nn.Embedding(3, 2), nn.EmbeddingBag(3, 2)):
        assert is_gemm_module(table) and not is_gemm_module(table, lookups=False)
    assert not is_gemm_module(nn.LayerNorm(2)) and not is_gemm_module(nn.Sequential())


class _Parts(nn.Module):
    """One small tensor of each kind, and a GEMM so that lookups count as GEMM weights."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))  # exactly the limit below: fp32
        self.big = nn.Parameter(torch.ones(9))  # one value over it: half
        self.register_buffer("steps", torch.arange(4))  # not floating
        self.register_buffer("centre", torch.zeros(2))
        self.proj = nn.Linear(2, 2)
        self.proj.register_buffer("mask", torch.ones(2))  # a GEMM module's buffer: half
        self.table = nn.Embedding(2, 2)
        self.rnn = nn.GRU(1, 1)
        self.norm = nn.LayerNorm(2)  # a norm island's own
        self.scripted = torch.jit.script(nn.Sequential(_Gate()))
        self.empty = nn.Parameter(torch.empty(0))


class _Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.g


def test_small_tensors_are_the_small_floating_ones_no_gemm_norm_or_script_owns() -> None:
    model = _Parts()
    assert _names(model, small_tensors(model, 8)) == ["centre", "empty", "scale"]
    assert _names(model, small_tensors(model, 9)) == ["big", "centre", "empty", "scale"]
    assert small_tensors(model, 0) == set()  # the limit 0: every tensor half, the empty too


class BigLayerNorm(nn.Module):
    """A model whose class name looks like a norm's: the root is judged by type alone."""

    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(2))
        self.proj = nn.Linear(2, 2)


def test_the_roots_own_small_tensors_count_though_its_name_looks_like_a_norm() -> None:
    model = BigLayerNorm()
    assert _names(model, small_tensors(model, 100)) == ["g"]


def test_a_small_table_is_an_ordinary_small_tensor_only_where_no_gemm_computes() -> None:
    tables = nn.ModuleDict({"small": nn.Embedding(4, 2), "bag": nn.EmbeddingBag(4, 2)})
    assert _names(tables, small_tensors(tables, 8)) == ["bag.weight", "small.weight"]
    with_gemm = nn.Sequential(tables, nn.Linear(2, 2))
    assert small_tensors(with_gemm, 8) == set()


def test_a_parametrized_gemm_weights_factors_are_the_gemms() -> None:
    """weight_norm keeps a conv's weight as two factors in its ``parametrizations``."""
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(2, 2, 1), dim=2)
    assert small_tensors(nn.Sequential(conv), 100) == set()
