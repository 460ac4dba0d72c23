"""0-dim fp32 tensors: they never promote a half tensor with dimensions, but with a 0-dim
half tensor (a loss) the result is fp32. Each model here is small and written for this
test; the promotion rule itself is checked against torch."""

from __future__ import annotations

import textwrap

import pytest
import torch

from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F)
_found = LINT.found


def test_the_promotion_the_rule_stands_on() -> None:
    half = torch.ones(3, dtype=torch.float16)
    assert (torch.tensor(0.0) + half.mean()).dtype == torch.float32
    assert (torch.tensor(0.0) + half).dtype == torch.float16


ACCUMULATORS = {
    "a loss layer, in place": """\
        class Deep(nn.Module):
            def __init__(self):
                super().__init__()
                self.crit = nn.SmoothL1Loss()

            def forward(self, preds, target):
                total = torch.zeros(())
                for p in preds:
                    total += self.crit(p, target)
                return total
        """,
    "functional losses and a mean": """\
        class Mixed(nn.Module):
            def forward(self, x, y):
                total = torch.tensor(0.0, device=x.device, requires_grad=True)
                total = total + F.huber_loss(x, y) + 0.1 * x.pow(2).mean()
                return total
        """,
    "a loss function of the file held as an attribute": """\
        def cosine_gap(a, b):
            return 1 - (a * b).sum(dim=-1).mean()


        class Views(nn.Module):
            def __init__(self, loss_fn=cosine_gap, weight=0.5):
                super().__init__()
                self.loss_fn = loss_fn
                self.weight = weight

            def forward(self, views, anchor):
                total = torch.tensor(0.0)
                for v in views:
                    total = total + self.weight * self.loss_fn(v, anchor)
                return total / len(views)
        """,
    "returned to a caller that adds it": """\
        class Tts(nn.Module):
            def __init__(self):
                super().__init__()
                self.mse = nn.MSELoss()

            def forward(self, out, target, weight):
                main = self.mse(out, target)
                extra, w = self.extra(out, weight)
                return main + extra

            def extra(self, out, weight):
                zero = torch.tensor(0.0, device=out.device)
                if weight == 0:
                    return zero, zero
                return weight * out.abs().mean(), weight
        """,
}


@pytest.mark.parametrize("body", ACCUMULATORS.values(), ids=list(ACCUMULATORS))
def test_a_0dim_fp32_accumulator_of_0dim_half_losses_is_reported(body: str) -> None:
    lines = textwrap.dedent(body).splitlines()
    made = next(i for i, line in enumerate(lines, 1) if "torch.tensor" in line or "zeros(" in line)
    assert _found(body) == [(made, "HP101")]


NOT_LEAKS = {
    "a 0-dim scale on a half tensor": """\
        class Scale(nn.Module):
            def forward(self, x):
                s = torch.tensor(0.5).to(x.device)
                return x * s.sqrt()
        """,
    "a 0-dim eps into a helper": """\
        def add_eps(h, eps):
            return h + eps


        class Eps(nn.Module):
            def forward(self, x):
                return add_eps(x, torch.tensor(1e-6))
        """,
    "a per-element loss": """\
        class PerElement(nn.Module):
            def forward(self, x, y):
                total = torch.tensor(0.0)
                return total + F.mse_loss(x, y, reduction="none")
        """,
}


@pytest.mark.parametrize("body", NOT_LEAKS.values(), ids=list(NOT_LEAKS))
def test_a_0dim_fp32_tensor_that_meets_no_0dim_half_value_is_not_reported(body: str) -> None:
    assert _found(body) == []
