"""Round twenty-two's recall rules (issue #41), each with small models of our own. Each is a
value the walk lost on its way from the factory to the half tensor it meets:

- a half tensor kept on ``self`` and read back in the same function, also as the argument
  of a helper (``.selfkept``);
- a half tensor kept on ``self`` by one method and read by another (``.selfkept``);
- a value shaped from the followed tensor (``grid.shape[1]``) but holding none of its values
  (``.shapeonly``);
- the index tensors of a sparse constructor given by keyword (``.sparse``, whose hook in
  ``.arguments`` no test needed before: without it the index rows are reported).

Every "reported" test fails on main before the round (ad4f856); the silent siblings are
asserted beside them, and the dtype each test claims is checked in torch.
"""

from __future__ import annotations

import warnings

import torch
from tests.support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F + "from geometry_lib import register\n\n\n")


# Mixture weights kept on self in forward, handed to a module-level helper that returns a
# tuple: its fp32 identity times the half weights makes an fp32 covariance.
_MIXTURE = """
def moments(w, pts):
    mass = w.sum(dim=1)
    centre = w.transpose(1, 2) @ pts / mass.unsqueeze(2)
    eye = EYE
    cov = (w.sum(dim=1) / mass)[..., None, None] * eye
    return mass, centre, cov


class Mixture(nn.Module):
    def __init__(self, d, k):
        super().__init__()
        self.score = nn.Linear(d, k)

    def forward(self, feats, pts):
        self.w = F.softmax(self.score(feats), dim=2)
        self.mass, self.centre, self.cov = moments(self.w, pts)
        return register(self.mass, self.centre, self.cov)
"""


def test_an_identity_times_weights_kept_on_self_leaks() -> None:
    assert LINT.lines(_MIXTURE.replace("EYE", "torch.eye(3).to(w.device)")) == [5]
    w = torch.softmax(torch.randn(2, 5, 4), dim=2).half()
    assert ((w.sum(dim=1) / w.sum(dim=1))[..., None, None] * torch.eye(3)).dtype == torch.float32


def test_an_identity_in_the_weights_dtype_stays_silent() -> None:
    assert LINT.lines(_MIXTURE.replace("EYE", "torch.eye(3, dtype=w.dtype, device=w.device)")) == []


# The same helper given an attribute that forward keeps an integer one-hot in: the identity
# meets no half tensor (the fp32 result goes to a function the lint cannot see).
def test_an_identity_times_an_integer_kept_on_self_stays_silent() -> None:
    body = _MIXTURE.replace("EYE", "torch.eye(3).to(w.device)").replace(
        "F.softmax(self.score(feats), dim=2)", "F.one_hot(self.score(feats).argmax(-1), 4)"
    )
    assert LINT.lines(body) == []


# A folding decoder: one method keeps the pooled code on self, another reads it and joins
# it with an fp32 grid (cat promotes the half code to fp32).
_FOLDING = """
class Folding(nn.Module):
    def __init__(self, d, g):
        super().__init__()
        self.enc = nn.Linear(3, d)
        self.g = g
        self.code = None

    def encode(self, pts):
        self.code = CODE

    def decode(self):
        side = torch.linspace(-0.05, 0.05, steps=self.g)
        grid = torch.stack(torch.meshgrid(side, side, indexing="ij"), dim=2).reshape(1, -1, 2)
        grid = grid.repeat(self.code.shape[0], 1, 1)
        code = self.code.unsqueeze(1).repeat(1, grid.shape[1], 1)
        return torch.cat([grid, code], dim=2)

    def forward(self, pts):
        self.encode(pts)
        return register(self.decode())
"""


def test_a_grid_joined_with_a_code_another_method_kept_leaks() -> None:
    assert LINT.lines(_FOLDING.replace("CODE", "self.enc(pts).max(dim=1)[0]")) == [13]
    side = torch.linspace(-0.05, 0.05, steps=2)
    grid = torch.stack(torch.meshgrid(side, side, indexing="ij"), dim=2).reshape(1, -1, 2)
    assert torch.cat([grid, torch.ones(1, 4, 3).half()], dim=2).dtype == torch.float32


def test_a_grid_joined_with_a_code_of_unknown_dtype_stays_silent() -> None:
    # the code another method keeps is an index count, not a floating tensor
    assert LINT.lines(_FOLDING.replace("CODE", "register(pts).argmax(-1)")) == []


# The followed grid gives the code only its length: the code holds the half features.
_TILED = """
class Tiled(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.enc = nn.Linear(3, d)

    def forward(self, pts):
        feats = self.enc(pts)
        grid = torch.linspace(-1, 1, 7).reshape(1, -1, 1).repeat(feats.shape[0], 1, 1)
        code = feats.unsqueeze(1).repeat(1, SIZE, 1)
        return register(torch.cat([grid, code], dim=2))
"""


def test_a_grid_met_by_features_tiled_to_its_length_leaks() -> None:
    assert LINT.lines(_TILED.replace("SIZE", "grid.shape[1]")) == [9]
    grid = torch.linspace(-1, 1, 7).reshape(1, -1, 1)
    assert torch.cat([grid, torch.ones(1, 7, 3).half()], dim=2).dtype == torch.float32


def test_a_grid_met_by_its_own_values_stays_silent() -> None:
    # code made from the grid's values: the join holds no half tensor
    body = _TILED.replace("feats.unsqueeze(1).repeat(1, SIZE, 1)", "grid.repeat(1, 1, 3) * 2")
    assert LINT.lines(body) == []


# A ring graph whose sparse adjacency takes float index rows by keyword: the constructor
# makes them int64, so only fp32 values reach the half features.
_RING = """
class Ring(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        h = self.fc(x)
        n = h.shape[0]
        rows = torch.linspace(0, n - 1, n).reshape(1, -1).repeat(2, 1)
        ring = torch.sparse_coo_tensor(indices=rows, values=VALUES, size=(n, n))
        return torch.sparse.mm(ring, h)
"""


def test_sparse_indices_given_by_keyword_stay_silent() -> None:
    assert LINT.lines(_RING.replace("VALUES", "torch.full((n,), 0.5, dtype=h.dtype)")) == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note on sparse invariant checks
        rows = torch.linspace(0, 2, 3).reshape(1, -1).repeat(2, 1)
        ring = torch.sparse_coo_tensor(indices=rows, values=torch.ones(3) / 2, size=(3, 3))
    assert ring._indices().dtype == torch.int64


def test_sparse_values_made_fp32_leak() -> None:
    assert LINT.lines(_RING.replace("VALUES", "torch.ones(n) / 2")) == [11]
