"""Round sixteen (issue 41): an op whose ``dtype=`` keyword names the model's dtype casts its
result (``mask.cumsum(1, dtype=x.dtype)``, ``torch.cumsum(mask, 1, dtype=x.dtype)``,
``m.sum(1, dtype=x.dtype)``, ``F.softmax(m, 1, dtype=dtype)``), so an fp32 factory read only
through it is no leak; ``dtype=torch.float32`` there keeps the op fp32 and the finding.
Small models written for this test, none copied from a library. Each silenced case fails
on the rules before this round; the kept findings are asserted beside.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F, prefix="HP1")
_found = LINT.found


def _model(op: str) -> str:
    return f"""\
    class Grid(nn.Module):
        def forward(self, x, dtype=None):
            b, c, h, w = x.shape
            mask = torch.ones((b, h, w), device=x.device)
            rows = {op}
            return x + rows.unsqueeze(1)
    """


_CASTS = [
    "mask.cumsum(1, dtype=x.dtype)",
    "torch.cumsum(mask, 1, dtype=x.dtype)",
    "mask.cumprod(2, dtype=x.dtype)",
    "mask.sum(1, keepdim=True, dtype=x.dtype)",
    "torch.sum(mask, 1, keepdim=True, dtype=x.dtype)",
    "mask.softmax(1, dtype=x.dtype)",
    "F.softmax(mask, dim=1, dtype=x.dtype)",
    "torch.log_softmax(mask, 1, dtype=x.dtype)",
    "torch.nansum(mask, 1, keepdim=True, dtype=dtype)",
    "mask.mean(1, keepdim=True, dtype=dtype)",
]


@pytest.mark.parametrize("op", _CASTS)
def test_dtype_keyword_of_the_model_casts(op: str) -> None:
    assert _found(_model(op)) == []


@pytest.mark.parametrize(
    "op",
    [
        "mask.cumsum(1, dtype=torch.float32)",
        "torch.cumsum(mask, 1, dtype=torch.float)",
        "F.softmax(mask, dim=1, dtype=torch.float32)",
        "mask.cumsum(1, dtype=None)",
        "mask.cumsum(1)",
    ],
)
def test_fp32_or_no_dtype_keyword_stays_a_finding(op: str) -> None:
    assert _found(_model(op)) == [(4, "HP101")]


def test_an_fp32_dtype_parameter_stays_a_finding() -> None:
    body = _model("mask.cumsum(1, dtype=dtype)").replace("dtype=None", "dtype=torch.float32")
    assert _found(body) == [(4, "HP101")]


def test_dtype_keyword_makes_the_half_result_it_is_read_as() -> None:
    x = torch.ones(1, 2, 3, 4, dtype=torch.bfloat16)
    mask = torch.ones(1, 3, 4)
    assert mask.cumsum(1, dtype=x.dtype).dtype == torch.bfloat16
    assert nn.functional.softmax(mask, 1, dtype=x.dtype).dtype == torch.bfloat16
    assert mask.cumsum(1, dtype=torch.float32).dtype == torch.float32
