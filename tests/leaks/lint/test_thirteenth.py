"""Thirteenth-round rules: a submodule bound by a chained assignment (``self.m = m =
Net(...)``); a 0-dim fp32 tensor met with an integer tensor, which makes an fp32 tensor with
dimensions; and a function imported from ``math`` (``from math import log``) gives a Python
number, so ``torch.tensor(log(n) / d)`` is a 0-dim fp32 factory. Each model here is small
and written for this test."""

from __future__ import annotations

import textwrap

import torch

from halfprec.leaks.lint import lint_source

HEAD = "import torch\nfrom torch import nn\n\n\n"


def _found(body: str, head: str = HEAD) -> list[int]:
    source = head + textwrap.dedent(body)
    offset = head.count("\n")
    return [f.line - offset for f in lint_source(source) if f.code == "HP101"]


CHAINED = """\
    class Mapper(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim
            self.net = nn.Linear(dim, dim)

        def forward(self, z):
            return self.net(z)


    class Gen(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.mapper = mapper = Mapper(dim)
            self.out = nn.Linear(mapper.dim, 4)

        def forward(self, x):
            z = torch.randn(x.shape[0], self.mapper.dim)
            return self.out(self.mapper(z) + x)
    """


def test_a_submodule_bound_by_a_chained_assignment_is_followed_into() -> None:
    assert _found(CHAINED) == [18]


def test_a_chained_assignment_of_a_weightless_layer_stays_silent() -> None:
    body = CHAINED.replace("self.net = nn.Linear(dim, dim)", "self.net = nn.Identity()")
    body = body.replace("self.out(self.mapper(z) + x)", "self.mapper(z).long() + x")
    assert _found(body) == []


INTEGER_TIMES_0DIM = """\
    class TimeFeatures(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n
            self.proj = nn.Linear(2 * n, n)

        def forward(self, t):
            rate = torch.tensor(math.log(100.0) / self.n, device=t.device)
            freqs = torch.exp(-rate * torch.arange(self.n, device=t.device))
            ang = t[:, None] * freqs[None, :]
            return self.proj(torch.cat([ang.sin(), ang.cos()], dim=-1))
    """
MATH = "import math\n\nimport torch\nfrom torch import nn\n\n\n"


def test_the_promotion_behind_the_integer_tensor_rule() -> None:
    rate = torch.tensor(0.5)
    freqs = torch.exp(-rate * torch.arange(4))
    assert freqs.dim() == 1 and freqs.dtype == torch.float32
    assert (torch.ones(2, 1, dtype=torch.float16) * freqs).dtype == torch.float32


def test_a_0dim_fp32_times_an_integer_tensor_has_dimensions_and_leaks() -> None:
    assert _found(INTEGER_TIMES_0DIM, MATH) == [8]


def test_a_0dim_fp32_times_a_half_tensor_stays_silent() -> None:
    body = INTEGER_TIMES_0DIM.replace("torch.arange(self.n, device=t.device)", "t")
    body = body.replace("t[:, None] * freqs[None, :]", "freqs[:, None].expand(-1, self.n)")
    assert _found(body, MATH) == []


FROM_MATH = """\
    class Scaled(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n

        def forward(self, x):
            w = torch.tensor(log(10.0) / self.n, device=x.device)
            return x.sum() * w
    """


def test_a_function_imported_from_math_gives_a_python_number() -> None:
    head = "from math import log\n\nimport torch\nfrom torch import nn\n\n\n"
    assert _found(FROM_MATH, head) == [7]


def test_a_function_of_another_module_may_give_a_tensor() -> None:
    head = "from torch import log\n\nimport torch\nfrom torch import nn\n\n\n"
    assert _found(FROM_MATH, head) == []
