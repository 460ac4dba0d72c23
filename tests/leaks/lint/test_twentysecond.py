"""Round twenty-one's precision rules, from the false alarms of blind freezes Q and R
(docs/leaks.md; issue 41), each on small models written for this test, none copied from a
library:

- a factory's tensor that is the other arm of fp32 the library asks for in a conditional
  expression (:mod:`.alternatives`);
- an integer factory compared with data in a stack of comparisons gives the data's masks;
  a ``.float()`` of them is the library's cast (:mod:`.compared`), and what meets the cast's
  fp32 first is no leak (:mod:`.asked`);
- a meeting read only for the indices of its order, through slices, arithmetic and
  reductions (``.norm(dim=-1).min(dim=1).indices``; :mod:`.sortkeys`).

Each "not reported" test fails on the rules before this round; the siblings asserted beside
them stay reported on both, and the dtype claims are checked with torch.
"""

from __future__ import annotations

import textwrap
import warnings

import pytest
import torch

from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F)
_found, _model = LINT.found, LINT.model


def _at(body: str, snippet: str, nth: int = 0) -> int:
    """The line of ``body`` (as :func:`_found` counts) holding ``snippet`` the nth time."""
    lines = [i for i, t in enumerate(textwrap.dedent(body).splitlines(), 1) if snippet in t]
    return lines[nth]


ARMS = """
class Arm(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, mask=None):
        h = self.proj(x)
        m = mask.float() if mask is not None else torch.ones(h.shape[:-1], device=h.device)
        return h * m[..., None] / m.sum(-1, keepdim=True)[..., None]


class Branch(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, mask=None):
        h = self.proj(x)
        if mask is not None:
            m = mask.to(torch.float32)
        else:
            m = torch.ones(h.shape[:-1]).to(h.device)
        return h * m[..., None]


class Passed(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, mask=None):
        h = self.proj(x)
        m = mask if mask is not None else torch.ones(h.shape[:-1], device=h.device)
        if mask is not None:
            n = mask
        else:
            n = torch.zeros(h.shape[:-1], device=h.device)
        return h * m[..., None] + n[..., None]


class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(4, 3)

    def forward(self, x, seq=True):
        scores = self.gate(x).softmax(-1)
        idx = scores.argmax(-1)
        if seq:
            ce = torch.zeros(scores.shape[0], 3, device=x.device)
            ce.scatter_add_(1, idx, torch.ones(idx.shape, device=x.device))
            loss = (ce * scores.mean(1)).sum()
        else:
            ce = torch.nn.functional.one_hot(idx, 3).float().mean(1)
            loss = (ce * scores.mean(1)).sum()
        return loss
"""


def test_a_factory_on_the_other_arm_of_fp32_asked_for_is_not_reported() -> None:
    found = _found(ARMS, "HP101")
    assert (_at(ARMS, "else torch.ones"), "HP101") not in found
    assert (_at(ARMS, "m = torch.ones"), "HP101") in found  # an if/else: followed
    # the other arm is the caller's mask, half in a half model: followed as before
    assert (_at(ARMS, "else torch.ones", 1), "HP101") in found
    assert (_at(ARMS, "n = torch.zeros"), "HP101") in found
    assert (_at(ARMS, "ce = torch.zeros"), "HP101") in found  # met half in its own branch
    h = torch.ones(2, 3, 4, dtype=torch.half)
    mask = torch.ones(2, 3, dtype=torch.bool)
    for model in (_model(ARMS, "Arm")().half(), _model(ARMS, "Branch")().half()):
        assert model(h, mask).dtype == torch.float32  # the library's arm is fp32 already
        assert model(h).dtype == torch.float32
    assert _model(ARMS, "Passed")().half()(h, mask.half()).dtype == torch.half
    assert _model(ARMS, "Counted")().half()(torch.ones(2, 5, 4).half()).dtype == torch.float32


SPLAT = """
def layers(occ, colors):
    k = colors.shape[-2]
    ids = torch.arange(k, device=colors.device).view(1, k, 1)
    mask = torch.stack([occ > ids, occ == ids, occ < ids], dim=-1).float()
    return torch.bmm(colors.flatten(0, 1).transpose(1, 2), mask.flatten(0, 1))


def compose(weights, background):
    scale = 1.0 / torch.maximum(weights, torch.tensor([1.0], device=weights.device))
    return background * scale


class Splat(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, occ):
        colors = self.proj(x)
        w = layers(occ, colors)
        return compose(w, colors[0, 0, :3])


class Own(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x)
        ids = torch.arange(h.shape[-1], device=h.device)
        mask = torch.stack([ids > 1, ids < 3], dim=-1).float()
        return h @ mask
"""


def test_an_arange_compared_with_data_and_what_meets_the_cast_mask() -> None:
    found = _found(SPLAT, "HP101")
    assert (_at(SPLAT, "ids = torch.arange"), "HP101") not in found
    assert (_at(SPLAT, "torch.tensor([1.0]"), "HP101") not in found
    # compared with numbers only, the mask is the arange's own table (ruling (a))
    assert (_at(SPLAT, "ids = torch.arange", 1), "HP101") in found
    occ = torch.tensor([[0, 1, 2], [2, 1, 0]])
    colors = torch.ones(2, 3, 4, dtype=torch.half)
    ids = torch.arange(3).view(1, 3, 1)
    mask = torch.stack([occ[..., None] > ids, occ[..., None] == ids], dim=-1)
    assert mask.dtype == torch.bool  # the comparison gives the data's mask
    with pytest.raises(RuntimeError, match="Half but found Float"):  # meets fp32 only
        torch.bmm(colors, mask.float()[:, :, :, 0].transpose(1, 2).repeat(1, 4, 1)[:, :4])
    assert (colors[0, 0] * torch.ones(4).float()).dtype == torch.float32


ORDERED = """
class Classes(nn.Module):
    def forward(self, corresps):
        flow, offset, logits = corresps["flow"], corresps["offset"], corresps["logits"]
        with torch.no_grad():
            _, c = logits.shape
            n = round(c**0.5)
            g = torch.meshgrid(*[torch.linspace(-1, 1, n) for _ in range(2)])
            g = torch.stack((g[1], g[0]), dim=-1).reshape(c, 2) * offset
            target = (g[None, :, :] - flow[:, None]).norm(dim=-1).min(dim=1).indices
        return logits.log_softmax(-1).gather(1, target[:, None])


class Nearest(nn.Module):
    def forward(self, corresps):
        flow, offset = corresps["flow"], corresps["offset"]
        g = torch.linspace(-1, 1, 9).reshape(9, 1) * offset
        return (g[None, :, :] - flow[:, None]).norm(dim=-1).min(dim=1).values
"""


def test_a_meeting_read_only_for_the_indices_of_its_order_is_not_reported() -> None:
    found = _found(ORDERED, "HP101")
    assert (_at(ORDERED, "torch.linspace"), "HP101") not in found
    assert (_at(ORDERED, "torch.linspace", 1), "HP101") in found  # the values leave
    half = {"flow": torch.randn(5, 2).half(), "offset": torch.tensor([0.5, 0.5]).half()}
    half["logits"] = torch.randn(5, 9).half()
    with warnings.catch_warnings():  # meshgrid without indexing= warns
        warnings.simplefilter("ignore", UserWarning)
        assert _model(ORDERED, "Classes")()(half).dtype == torch.half
    assert _model(ORDERED, "Nearest")()(half).dtype == torch.float32
