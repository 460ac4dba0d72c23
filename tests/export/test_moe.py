"""Mixture-of-experts layers computed densely for ONNX (halfprec.export.moe)."""

from __future__ import annotations

import copy

import pytest
import torch

from halfprec.export.moe import dense_experts
from support.hf_models import build

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("name", ["mixtral", "qwen2-moe"])
def test_dense_experts_give_the_dispatched_output(name: str) -> None:
    model = build(name)
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        dense = copy.deepcopy(model)
        assert dense_experts(dense) == 1  # one layer, one experts module
        got = dense(input_ids=ids).logits
        again = model(input_ids=ids).logits  # the original model keeps its own forward
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(again, want)


def test_an_expert_nobody_chose_cannot_poison_the_output_with_nan() -> None:
    model = build("mixtral")
    experts = model.model.layers[0].mlp.experts
    hidden = torch.randn(5, 32, generator=torch.Generator().manual_seed(2))
    index = torch.tensor([[0, 1]] * 5)  # expert 3 gets no token
    weights = torch.full((5, 2), 0.5)
    with torch.no_grad():
        experts.down_proj[3].fill_(float("inf"))  # as an fp16 overflow would make it
        want = experts(hidden, index, weights)
        dense_experts(model)
        got = experts(hidden, index, weights)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
