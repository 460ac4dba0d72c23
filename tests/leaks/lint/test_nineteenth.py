"""Round eighteen's precision rules under the lead's fourth ruling, "fp32 the library asks
for" (docs/leaks.md; issue 41), each on small models written for this test, none copied
from a library:

- (b) a factory's tensor that first meets fp32 or double the library asks for in a value
  that is no plain site (a ``torch.FloatTensor(...)``, a helper's ``.type(dtype)`` return
  of a ``dtype=torch.float32`` default, a cast of a computed value, ``.double()``) is not
  reported (:mod:`.asked`);
- (a) a cast to fp32 of a plain factory's own value (``.float()``, ``.type(torch.FloatTensor)``,
  ``.type(torch.float32)`` after a ``cat([pos] * w)``) is part of the factory: reported
  where it meets half;
- a 0-dim ``torch.tensor(c)`` of a number the module holds, cast ``.type(torch.float)``,
  keeps a half operand half;
- HP302 only for limits that half cannot hold (:mod:`.limits`).

Each "not reported" and "reported" test fails on the rules before this round; the
siblings asserted beside them are reported on both.
"""

from __future__ import annotations

import textwrap

import torch

from halfprec.leaks.lint.config import LintConfig
from support.lint_models import Snippets

HEAD = "import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n"
LINT = Snippets(HEAD, prefix="HP")
HP3 = Snippets(HEAD, prefix="HP", config=LintConfig(select=("HP3",)))
_found, _model = LINT.found, LINT.model


def _at(body: str, snippet: str, nth: int = 0) -> int:
    """The line of ``body`` (as :func:`_found` counts) holding ``snippet`` the nth time."""
    lines = [i for i, t in enumerate(textwrap.dedent(body).splitlines(), 1) if snippet in t]
    return lines[nth]


HELPER_TABLE = """
def sincos(n, dim, dtype=torch.float32):
    pos = torch.arange(n)[:, None] / (torch.arange(dim)[None, :] + 1)
    return torch.cat((pos.sin(), pos.cos()), dim=1).type(dtype)


def plain(n, dim):
    pos = torch.arange(n)[:, None] / (torch.arange(dim)[None, :] + 1)
    return torch.cat((pos.sin(), pos.cos()), dim=1)


class Tagged(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(12, 12)

    def forward(self, x):
        b, n, d = x.shape
        table = sincos(n, 4).to(x.device)
        tags = torch.zeros(n, 4, device=x.device)
        return self.proj(x) + torch.cat((table, tags), dim=-1)


class Untagged(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(12, 12)

    def forward(self, x):
        b, n, d = x.shape
        table = plain(n, 4).to(x.device)
        tags = torch.zeros(n, 4, device=x.device)
        return self.proj(x) + torch.cat((table, tags), dim=-1)
"""


def test_factory_joined_with_a_helpers_float32_return_is_not_reported() -> None:
    found = _found(HELPER_TABLE)
    tags = _at(HELPER_TABLE, "tags = torch.zeros")
    assert (tags, "HP101") not in found  # Tagged's: the table is float32 by its dtype=
    tags = _at(HELPER_TABLE, "tags = torch.zeros", 1)
    assert (tags, "HP101") in found  # Untagged's: the table has no asked dtype
    x = torch.randn(2, 3, 12).half()
    tagged = _model(HELPER_TABLE, "Tagged")().half()
    assert tagged(x).dtype == torch.float32  # fp32 by the table, tags half or not


MASKED = """
class Pooled(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, blocks):
        mask = torch.FloatTensor(blocks).to(x.device)
        adj = mask + torch.eye(x.shape[1], device=x.device)
        return torch.matmul(adj, self.proj(x))


class Ones(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        mask = torch.ones(x.shape[1], x.shape[1], device=x.device)
        adj = mask + torch.eye(x.shape[1], device=x.device)
        return torch.matmul(adj, self.proj(x))
"""


def test_factory_meeting_a_float_tensor_first_is_not_reported() -> None:
    found = _found(MASKED)
    eye = _at(MASKED, "torch.eye")
    assert (eye, "HP101") not in found  # the eye meets the FloatTensor mask first
    ones, eye = _at(MASKED, "torch.ones"), _at(MASKED, "torch.eye", 1)
    assert (ones, "HP101") in found and (eye, "HP101") in found  # plain ones and eye: leaks


DOUBLED = """
def spread(a, *dims):
    return a.view(a.shape + (1,) * len(dims)).expand(a.shape + tuple(dims))


class Series(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        scale = self.proj(x)
        k = spread(torch.arange(4), *scale.size()).double()
        s = torch.lgamma(k + 1) + (k - 1).pow(2) * scale.pow(2)
        signs = torch.tensor([1.0, -1.0]).double().to(x.device).repeat(2)
        return (spread(signs, *scale.size()) * s).sum(0)


class Floated(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        signs = torch.tensor([1.0, -1.0]).float().to(x.device).repeat(2)
        return self.proj(x) * signs
"""


def test_a_factory_made_double_on_its_own_chain_is_not_reported() -> None:
    found = _found(DOUBLED)
    k, signs = _at(DOUBLED, "torch.arange"), _at(DOUBLED, "torch.tensor")
    assert (k, "HP101") not in found and (signs, "HP101") not in found
    signs = _at(DOUBLED, "torch.tensor", 1)
    assert (signs, "HP101") in found  # .float() of the factory's own value: part of it


GRIDS = """
class Heat(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        hm = self.conv(x).sum(2)
        ramp = torch.cuda.comm.broadcast(
            torch.arange(hm.shape[-1]).type(torch.cuda.FloatTensor), devices=[0])[0]
        return (hm * ramp).sum(-1)


class Positions(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Linear(2, 4)

    def forward(self, x):
        b, d, h, w = x.shape
        y = torch.stack([
            torch.cat([torch.arange(h).unsqueeze(1)] * w, dim=1),
            torch.cat([torch.arange(w).unsqueeze(0)] * h, dim=0),
        ])
        y = y.view([2, h * w]).transpose(1, 0)
        y = y.type(torch.float32).to(x.device)
        return x + self.pos(y).transpose(1, 0).view([d, h, w])
"""


def test_a_cast_of_the_factorys_own_value_is_reported_where_it_meets_half() -> None:
    found = _found(GRIDS)
    ramp = _at(GRIDS, "torch.arange")
    assert (ramp, "HP101") in found  # .type(torch.cuda.FloatTensor), copied per device
    ys, xs = _at(GRIDS, "torch.arange", 1), _at(GRIDS, "torch.arange", 2)
    assert (ys, "HP101") in found and (xs, "HP101") in found  # [pos] * w, cast later
    positions = _model(GRIDS, "Positions")().half()
    try:
        positions(torch.randn(1, 4, 2, 3).half())
    except RuntimeError as exc:  # the half Linear takes fp32 positions: a dtype mismatch
        assert "dtype" in str(exc) or "Half" in str(exc) or "Float" in str(exc)
    else:  # pragma: no cover - a torch that promoted silently would still make fp32
        raise AssertionError("fp32 positions met the half layer without an error")


COMPONENTS = """
class Prior(nn.Module):
    def __init__(self, components):
        super().__init__()
        self.components = components
        self.mu = nn.Linear(4, 4)

    def forward(self, z):
        c = self.components
        scores = self.mu(z).sum(-1, keepdim=True).expand(-1, c)
        return torch.logsumexp(scores - torch.log(torch.tensor(c).type(torch.float)), dim=1)
"""


def test_a_0_dim_number_cast_to_float_keeps_half_half() -> None:
    assert (_at(COMPONENTS, "torch.tensor(c)"), "HP101") not in _found(COMPONENTS)
    prior = _model(COMPONENTS, "Prior")(3).half()
    assert prior(torch.randn(2, 4).half()).dtype == torch.float16


LIMITS = """
class Norm(nn.Module):
    def forward(self, x):
        a = x / (x.sum() + torch.finfo(torch.float32).eps)
        b = x / (x.sum() + torch.finfo(torch.float64).eps)
        c = x.clamp(min=torch.finfo(torch.float32).tiny)
        return a + b + c
"""


def test_hp302_only_for_limits_half_cannot_hold() -> None:
    found = HP3.found(LIMITS)
    eps32, eps64 = _at(LIMITS, "float32).eps"), _at(LIMITS, "float64).eps")
    assert (eps32, "HP302") not in found  # 2**-23: a subnormal in fp16, a normal in bf16
    tiny = _at(LIMITS, ".tiny")
    assert (eps64, "HP302") in found and (tiny, "HP302") in found  # 2**-52, 2**-126: 0
    eps = torch.finfo(torch.float32).eps
    assert torch.tensor(eps, dtype=torch.float16).item() == eps
    assert torch.tensor(eps, dtype=torch.bfloat16).item() == eps
    assert torch.tensor(torch.finfo(torch.float32).tiny, dtype=torch.float16).item() == 0.0


FILLED = """
class Project(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)

    def forward(self, x, target):
        logp = self.head(x).log_softmax(-1)
        pos = target.clamp(0, 3)
        m = torch.zeros(x.shape[0], 4, device=x.device)
        m.view(-1).index_add_(0, pos.long().view(-1), (pos - pos.floor()).float().view(-1))
        return -(m * logp).sum()


class Scores(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 1)

    def forward(self, x, rows, cols, n):
        logits = self.head(x).view(-1).float()
        table = torch.full((n, n), -1e4, device=x.device)
        table[rows, cols] = logits
        return table.log_softmax(-1)
"""


def test_a_tensor_filled_with_fp32_asked_for_is_not_reported() -> None:
    found = _found(FILLED)
    assert (_at(FILLED, "torch.zeros"), "HP101") not in found  # index_add_ of a .float()
    assert (_at(FILLED, "torch.full"), "HP101") not in found  # written logits.float()
    project = _model(FILLED, "Project")().half()
    out = project(torch.randn(2, 4).half(), torch.tensor([[0.5, 1.5, 2.0, 3.0]] * 2))
    assert out.dtype == torch.float32  # fp32 by the asked source, whatever m's dtype
