"""A ``torch.arange`` whose bound or step is a Python float only through the data flow (a
name bound to a true division, an element of a tuple of them) is fp32, as one with a float
literal is: a helper that takes no tensor makes a noise grid that way, and the grid meets
the half image below ``forward``. Each model here is small and written for this test; the
torch checks show what the model does in half."""

from __future__ import annotations

import pytest
import torch

from support.lint_models import hp101_lines, model_class

TUPLE_STEP = """\
    def ramp(h, w, device=None):
        delta = (1 / h, 1 / w)
        return torch.arange(0, 1, delta[1], device=device)


    class Ramp(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, img):
            return self.proj(img + ramp(img.shape[0], img.shape[1], img.device))
    """


def test_an_arange_stepped_by_an_element_of_a_tuple_of_divisions_is_reported() -> None:
    model = model_class(TUPLE_STEP, "Ramp")(4).half()
    assert torch.arange(0, 1, 1 / 4).dtype == torch.float32
    with pytest.raises(RuntimeError):  # the fp32 image into the half Linear
        model(torch.randn(2, 4).half())
    assert hp101_lines(TUPLE_STEP) == [3]


def test_an_arange_stepped_by_a_name_bound_to_a_division_is_reported() -> None:
    body = """\
        class Grid(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def positions(self, n, span):
                step = span / n
                return torch.arange(0, span, step)

            def forward(self, x):
                return self.proj(x) * self.positions(x.shape[-1], 2)
        """
    model = model_class(body, "Grid")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float32
    assert hp101_lines(body) == [8]


def test_an_arange_ended_by_a_list_element_of_a_float_is_reported() -> None:
    body = """\
        class Span(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                bounds = [x.shape[-1] * 0.5, 1]
                t = torch.arange(0, bounds[0], 0.5)
                return self.proj(x) - t
        """
    assert hp101_lines(body) == [8]  # a literal step: reported before and after
    ended = body.replace("0, bounds[0], 0.5", "bounds[0]")
    assert torch.arange(4 * 0.5).dtype == torch.float32
    assert hp101_lines(ended) == [8]


def test_an_arange_of_integer_elements_and_floor_divisions_stays_silent() -> None:
    body = """\
        class Index(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                sizes = (x.shape[-1] // 2, x.shape[-1])
                step = x.shape[0] // 2
                idx = torch.arange(0, sizes[1], max(step, 1))
                return self.proj(x) * idx
        """
    assert hp101_lines(body) == []
