"""Class weights of a functional loss: ``F.cross_entropy(h, y, weight=w)``,
``F.nll_loss(h, y, w)`` and ``F.embedding_bag(..., per_sample_weights=w)`` need ``w`` in
the input's dtype (else they raise), so ``torch.tensor(data)`` of data of any dtype is
reported there: float data is fp32, integer data is int64, neither is half. Each model
here is small and written for this test; the torch checks show what it does in half."""

from __future__ import annotations

import pytest
import torch

from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F)
_found, _module = LINT.lines, LINT.model

HEADS = """\
    class Heads(nn.Module):
        def __init__(self, heads):
            super().__init__()
            self.proj = nn.Linear(4, 5)
            self.heads = heads

        def forward(self, x, target):
            logits = self.proj(x)
            losses = []
            for start, n, weight in self.heads:
                losses.append(
                    F.cross_entropy(
                        logits[:, start : start + n],
                        target[:, start].long(),
                        weight=torch.tensor(weight).to(x.device) if weight is not None else None,
                    )
                )
            return torch.stack(losses).sum()
    """

NLL = """\
    class Nll(nn.Module):
        def __init__(self, class_weights):
            super().__init__()
            self.proj = nn.Linear(4, 3)
            self.class_weights = class_weights

        def forward(self, x, target, task: str):
            w = torch.tensor(self.class_weights[task])
            return F.nll_loss(self.proj(x).log_softmax(-1), target, w)
    """

BAG = """\
    class Bag(nn.Module):
        def __init__(self, scores):
            super().__init__()
            self.table = nn.Parameter(torch.randn(10, 4))
            self.scores = scores

        def forward(self, ids, offsets, task: str):
            w = torch.tensor(self.scores[task])
            return F.embedding_bag(ids, self.table, offsets, mode="sum", per_sample_weights=w)
    """


def test_a_class_weight_of_cross_entropy_is_reported() -> None:
    model = _module(HEADS, "Heads")([(0, 3, [1.0, 2.0, 3.0])]).half()
    x, target = torch.randn(2, 4).half(), torch.zeros(2, 5)
    with pytest.raises(RuntimeError, match="Half"):
        model(x, target)
    assert _found(HEADS) == [15]


def test_a_positional_weight_of_nll_loss_is_reported() -> None:
    model = _module(NLL, "Nll")({"a": [1.0, 1.0, 2.0]}).half()
    with pytest.raises(RuntimeError, match="Half"):
        model(torch.randn(2, 4).half(), torch.tensor([0, 2]), "a")
    assert _found(NLL) == [8]


def test_per_sample_weights_of_an_embedding_bag_are_reported() -> None:
    model = _module(BAG, "Bag")({"a": [0.5, 1.0, 2.0]}).half()
    with pytest.raises(RuntimeError, match="same type"):
        model(torch.tensor([0, 1, 2]), torch.tensor([0]), "a")
    assert _found(BAG) == [8]


def test_a_weight_cast_to_the_input_dtype_stays_silent() -> None:
    cast = NLL.replace("w, ", "w.to(x.dtype)").replace(", w)", ", w.to(x.dtype))")
    assert _found(cast) == []


def test_data_of_any_dtype_as_a_target_stays_silent() -> None:
    # the target of cross_entropy is class indices: integer data is what it takes
    target = NLL.replace(", target, w)", ", w)")
    assert _found(target) == []
