"""Leaks whose fp32 travels a longer way: the data flow still finds them. Each model here
is small and written for this test."""

from __future__ import annotations

import textwrap

from halfprec.leaks.lint import lint_source

HEAD = "import math\nimport torch\nfrom torch import nn\n\n\n"


def _found(body: str) -> list[tuple[int, str]]:
    source = HEAD + textwrap.dedent(body)
    return [(f.line - 5, f.code) for f in lint_source(source)]


def test_an_integer_arange_times_a_python_float_name_is_fp32() -> None:
    body = """\
        class Sinusoid(nn.Module):
            def forward(self, t):
                half = self.dim // 2
                freqs = math.log(self.theta) / (half - 1)
                freqs = torch.exp(torch.arange(half, device=t.device) * -freqs)
                angles = t[:, None] * freqs[None, :]
                return torch.cat((angles.sin(), angles.cos()), dim=-1)
        """
    assert _found(body) == [(5, "HP101")]


def test_an_integer_arange_times_an_integer_name_stays_integer() -> None:
    body = """\
        class Offsets(nn.Module):
            def forward(self, x):
                stride = x.shape[1] // 2
                idx = torch.arange(x.shape[0], device=x.device) * stride
                return x.flatten(0, 1)[idx]
        """
    assert _found(body) == []


HELPERS = """\
from blocks import Denoiser


def default(value, fallback):
    if value is not None:
        return value
    return fallback() if callable(fallback) else fallback


"""


def test_a_helper_input_is_floating_when_its_caller_passes_a_floating_tensor() -> None:
    body = """\
        class Diffusion(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def noised(self, x_start, level):
                jitter = torch.rand(x_start.shape[0], 1, device=x_start.device)
                return self.net(x_start * jitter, level)

            def forward(self, x, level):
                return self.noised(x, level)
        """
    assert _found(HELPERS + textwrap.dedent(body)) == [(16, "HP101")]


def test_a_value_a_helper_returns_from_a_lambda_is_floating() -> None:
    body = """\
        class Diffusion(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def forward(self, x, noise=None):
                noise = default(noise, lambda: torch.randn_like(x))
                offset = torch.randn(x.shape[:2], device=x.device)
                noise += 0.1 * offset[:, :, None, None]
                return self.net(noise)
        """
    assert _found(HELPERS + textwrap.dedent(body)) == [(17, "HP101")]


def test_a_tensor_a_lambda_hands_to_a_helper_is_followed() -> None:
    body = """\
        class Diffusion(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def draw(self, batch):
                return (0.5 * torch.randn((batch,), device=self.device)).exp()

            def forward(self, x, sigma=None):
                sigmas = default(sigma, lambda: self.draw(x.shape[0]))
                return self.net(x + sigmas[:, None, None, None] * torch.randn_like(x))
        """
    assert _found(HELPERS + textwrap.dedent(body)) == [(16, "HP101")]


def test_a_helper_input_only_an_integer_is_passed_to_stays_integer() -> None:
    body = """\
        class Picker(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def pick(self, ids):
                weights = torch.ones(ids.shape[0], device=ids.device)
                return self.net(ids * weights)

            def forward(self, x):
                return self.pick(torch.arange(x.shape[0], device=x.device))
        """
    assert _found(HELPERS + textwrap.dedent(body)) == []


def test_the_bounds_of_a_random_fill_are_numbers_not_tensors_met() -> None:
    body = """\
        class Crop(nn.Module):
            def area(self, x, scale):
                return x.shape[-1] * torch.empty(1).uniform_(scale[0], scale[1]).item()

            def forward(self, x):
                return x[..., : int(self.area(x, x.new_tensor([0.5, 1.0])))]
        """
    assert _found(body) == []


def test_a_tensor_of_a_scalar_expression_is_zero_dim() -> None:
    body = """\
        def similarity(a, b):
            scale = torch.tensor(1 / 0.07).log()
            return scale.exp() * torch.bmm(a, b)


        class Head(nn.Module):
            def forward(self, x):
                return similarity(self.proj(x), x.transpose(1, 2))
        """
    assert _found(body) == []


def test_a_diagonal_of_a_half_vector_is_half() -> None:
    body = """\
        class Gaussian(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def forward(self, x):
                spread = torch.diag(x.mean(0).clamp(min=1e-6))
                return self.net(spread + 1e-3 * torch.eye(x.shape[1], device=x.device))
        """
    assert _found(HELPERS + textwrap.dedent(body)) == [(17, "HP101")]


def test_a_sum_with_an_fp32_factory_is_fp32_and_only_that_factory_is_reported() -> None:
    body = """\
        class Gaussian(nn.Module):
            def forward(self, x):
                spread = x.transpose(0, 1) @ x
                spread = spread + 1e-3 * torch.eye(x.shape[1], device=x.device)
                spread = spread + 1e-4 * torch.eye(x.shape[1], device=x.device)
                return torch.linalg.cholesky(spread.float()).to(spread.dtype)
        """
    assert _found(body) == [(4, "HP101")]


def test_a_helper_value_is_followed_three_calls_deep() -> None:
    body = """\
        class Diffusion(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = Denoiser()

            def draw(self, batch, device):
                return torch.rand(batch, device=device)

            def mix(self, x_start, t):
                return self.net(x_start * t[:, None])

            def losses(self, x_start, t):
                return self.mix(x_start, t).mean()

            def forward(self, x):
                return self.losses(x, self.draw(x.shape[0], x.device))
        """
    assert _found(HELPERS + textwrap.dedent(body)) == [(16, "HP101")]


def test_a_tensor_met_with_values_made_from_itself_meets_no_half() -> None:
    body = """\
        class Rope(nn.Module):
            def table(self, hidden_states):
                out = hidden_states.unsqueeze(-1) * 0.5
                return torch.stack([torch.cos(out), -torch.sin(out)], dim=-1)

            def forward(self, x):
                grid = torch.zeros(x.shape[1], 2, device=x.device)
                return x[..., None, None] * self.table(grid).to(x.dtype)
        """
    assert _found(body) == []


def test_a_large_constant_in_the_branch_a_float16_test_excludes_is_not_reported() -> None:
    body = """\
        class Pool(nn.Module):
            def forward(self, x, p_mask):
                if p_mask.dtype == torch.float16:
                    x = x * (1 - p_mask) - 65500 * p_mask
                else:
                    x = x * (1 - p_mask) - 1e30 * p_mask
                if p_mask.dtype != torch.float16:
                    x = x - 1e30 * p_mask
                return x - 1e30 * p_mask
        """
    assert _found(body) == [(9, "HP301")]
