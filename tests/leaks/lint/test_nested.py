"""A function defined inside the walked function (``def ease(t): ...`` in ``forward`` or in
a helper of it) is followed into, as a function of the file is: the tensor handed to it
comes back out of its ``return`` into the call. Each model here is small and written for
this test; the torch checks show what the model does in half."""

from __future__ import annotations

import pytest
import torch

from support.lint_models import hp101_lines, model_class

EASED = """\
    class Eased(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            def ease(t):
                return 3 * t**2 - 2 * t**3

            ramp = ease(torch.linspace(0, 1, x.shape[-1]))
            return self.proj(x * ramp)
    """


def test_a_table_through_a_function_defined_in_forward_is_reported() -> None:
    model = model_class(EASED, "Eased")(4).half()
    with pytest.raises(RuntimeError):  # x * ramp is fp32, into the half Linear
        model(torch.randn(2, 4).half())
    assert hp101_lines(EASED) == [10]


def test_a_table_reduced_to_0_dim_by_the_inner_function_stays_silent() -> None:
    body = EASED.replace("return 3 * t**2 - 2 * t**3", "return (3 * t**2).sum()")
    model = model_class(body, "Eased")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float16
    assert hp101_lines(body) == []


def test_a_noise_through_a_function_defined_in_a_helper_is_reported() -> None:
    body = """\
        class Noisy(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def noise(self, shape):
                def squash(t):
                    return t.tanh() * 0.1

                return squash(torch.randn(shape))

            def forward(self, x):
                return self.proj(x + self.noise(x.shape))
        """
    model = model_class(body, "Noisy")(4).half()
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4).half())
    assert hp101_lines(body) == [10]


def test_a_grid_through_an_inner_function_with_other_arguments_is_reported() -> None:
    body = """\
        class Shifted(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                def shift(offset, grid):
                    return grid + offset

                grid = shift(0.5, torch.arange(0.0, x.shape[-1]))
                return self.proj(x - grid)
        """
    model = model_class(body, "Shifted")(4).half()
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4).half())
    assert hp101_lines(body) == [10]


def test_a_table_a_function_of_the_file_reduces_to_0_dim_stays_silent() -> None:
    body = """\
        def energy(t):
            return (t**2).mean()


        class Scaled(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                return self.proj(x * energy(torch.rand(x.shape[-1])))
        """
    model = model_class(body, "Scaled")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float16  # 0-dim: no promotion
    assert hp101_lines(body) == []


NAMED_LAMBDA = EASED.replace(
    "def ease(t):\n                return 3 * t**2 - 2 * t**3\n",
    "ease = lambda t: 3 * t**2 - 2 * t**3\n",
)


def test_a_table_through_a_lambda_bound_to_a_name_is_reported() -> None:
    model = model_class(NAMED_LAMBDA, "Eased")(4).half()
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4).half())
    assert hp101_lines(NAMED_LAMBDA) == [9]


def test_a_table_as_the_second_parameter_of_a_named_lambda_is_reported() -> None:
    body = NAMED_LAMBDA.replace("lambda t: 3 * t**2 - 2 * t**3", "lambda s, t: t * s")
    body = body.replace("ease(torch.linspace", "ease(0.5, torch.linspace")
    assert hp101_lines(body) == [9]


def test_a_table_a_named_lambda_casts_stays_silent() -> None:
    body = NAMED_LAMBDA.replace("lambda t: 3 * t**2 - 2 * t**3", "lambda t: t.to(x.dtype)")
    model = model_class(body, "Eased")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float16
    assert hp101_lines(body) == []
