"""HP302 where ``torch.finfo(torch.float32)`` meets only values that no half model changes:
tensors made fp32/fp64 or integer by their own code, and Python numbers. Each model here is
small and written for this test; beside each silent case a guard whose other operand is a
half activation (or a tensor of unknown dtype) is still reported."""

from __future__ import annotations

from support.lint_models import Snippets

HEAD = "import math\nimport torch\nfrom torch import nn\n\n\n"
LINT = Snippets(HEAD, prefix="HP3")
_found = LINT.found


def test_tiny_added_to_a_histogram_of_indices_is_silent() -> None:
    body = """\
        class Router(nn.Module):
            def forward(self, x):
                gates = self.proj(x).softmax(-1)
                n = gates.shape[0]
                top = torch.argmax(gates, dim=1)
                hist = 100 * torch.histc(top.squeeze() + 1, bins=8, min=1, max=8) / n
                tiny = torch.finfo(torch.float32).tiny
                hist = torch.sort(hist, dim=0, descending=True).values + tiny
                return gates, hist
        """
    assert _found(body) == []


def test_tiny_added_to_the_gates_themselves_is_reported() -> None:
    body = """\
        class Router(nn.Module):
            def forward(self, x):
                gates = self.proj(x).softmax(-1)
                hist = torch.sort(gates, dim=0).values + torch.finfo(torch.float32).tiny
                return hist
        """
    assert _found(body) == [(4, "HP302")]


def test_eps_on_double_data_is_silent() -> None:
    body = """\
        class Solver(nn.Module):
            def forward(self, x):
                t = x.detach().double()
                span = t.abs() + 1
                tol = 8 * torch.finfo(torch.float64).eps * span
                return x, tol
        """
    assert _found(body) == []


def test_eps_on_the_activation_or_a_parameter_is_reported() -> None:
    body = """\
        class Solver(nn.Module):
            def forward(self, x, trial):
                t = self.layer(x)
                tol = 8 * torch.finfo(torch.float32).tiny * t.abs()
                step = trial + torch.finfo(torch.float32).tiny
                low = t.clamp(min=torch.finfo(torch.float32).tiny)
                return tol, step, low
        """
    assert _found(body) == [(4, "HP302"), (5, "HP302"), (6, "HP302")]


def test_eps_on_an_explicit_float32_buffer_is_silent() -> None:
    body = """\
        class Denoise(nn.Module):
            def forward(self, x):
                acc = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
                weights = torch.ones(4, dtype=torch.float64).to(torch.float32)
                norm = acc / (weights.sum() + torch.finfo(torch.float32).eps)
                count = torch.zeros_like(acc)
                mean = acc / torch.clamp_min(count.reshape(-1), torch.finfo(torch.float32).eps)
                return x, norm, mean
        """
    assert _found(body) == []


def test_a_pure_number_is_followed_to_where_it_is_read() -> None:
    body = """\
        class Solver(nn.Module):
            def forward(self, x):
                steps = math.ceil(math.log2(torch.finfo(torch.float32).max)) + 2
                for _ in range(2 * steps):
                    x = self.layer(x)
                eps = torch.finfo(torch.float32).tiny
                return x + eps
        """
    assert _found(body) == [(6, "HP302")]
