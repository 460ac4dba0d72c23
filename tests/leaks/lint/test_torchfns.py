"""A torch function a module holds as an attribute (``self.permute = F.conv2d``, one picked
from a dict of them by rank, either of an ``if``) is that function: an fp32 tensor given to
it meets the call's other tensors (see :mod:`halfprec.leaks.lint.torchfns`). Each model here
is small and written for this test; the torch checks show what the model does in half."""

from __future__ import annotations

import pytest
import torch

from support.lint_models import hp101_lines, model_class

HEAD = "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n\n"

PICKED = """\
    class Mix(nn.Module):
        def __init__(self, d, rank=0):
            super().__init__()
            self.v = nn.Parameter(torch.randn(2, d))
            self.d = d
            self.apply_fn = {0: F.linear, 1: F.conv1d}[rank]

        def weight(self):
            w = torch.eye(self.d)
            for v in self.v:
                w = w - 2 * torch.outer(v, v) / torch.dot(v, v)
            return w

        def forward(self, x):
            return self.apply_fn(x, self.weight())
    """


def test_a_table_given_to_a_torch_function_picked_from_a_dict_is_reported() -> None:
    model = model_class(PICKED, "Mix", HEAD)(4).half()
    with pytest.raises(RuntimeError):  # F.linear(half x, fp32 weight)
        model(torch.randn(2, 4).half())
    assert hp101_lines(PICKED, HEAD) == [9]


def test_a_table_given_to_a_torch_function_held_as_such_is_reported() -> None:
    body = PICKED.replace("{0: F.linear, 1: F.conv1d}[rank]", "torch.matmul")
    model = model_class(body, "Mix", HEAD)(4).half()
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4).half())
    assert hp101_lines(body, HEAD) == [9]


def test_a_table_given_to_either_torch_function_of_an_if_is_reported() -> None:
    body = PICKED.replace("{0: F.linear, 1: F.conv1d}[rank]", "F.linear if rank == 0 else torch.mm")
    assert hp101_lines(body, HEAD) == [9]


def test_a_table_given_to_a_function_of_the_callers_choice_stays_unknown() -> None:
    body = PICKED.replace("(self, d, rank=0)", "(self, d, fn=None)").replace(
        "{0: F.linear, 1: F.conv1d}[rank]", "fn"
    )
    assert hp101_lines(body, HEAD) == []


def test_a_table_cast_before_the_torch_function_stays_silent() -> None:
    body = PICKED.replace("self.weight())", "self.weight().to(x.dtype))")
    assert hp101_lines(body, HEAD) == []
