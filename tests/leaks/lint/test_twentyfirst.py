"""Round twenty's precision rules, from the false alarms of blind freezes O and P
(docs/leaks.md; issue 41), each on small models written for this test, none copied from a
library:

- fp32 the library asks for stays fp32 through the ops whose result has their operands'
  dtype (``s.exp()``, ``torch.sum(s, -1)``, ``torch.div(a, n)``, ``torch.zeros_like(s)``),
  through a tuple's element (``t, w = a, b``; ``a, s = self.helper(...)``) and through a
  helper's parameter that every call passes it (:mod:`.kept`, :mod:`.asked`);
- a half layer with weights called with such a value raises, so what it returns never
  exists in a half model (:mod:`.kept`);
- HP301 is not reported for a constant in a tensor holding such fp32, nor for one written
  into a tensor made by fp32 factories and numbers (:mod:`.landing`);
- a 0-dim tensor written at a boolean mask is a masked fill in the target's dtype
  (:mod:`.maskfill`); at integer indices it stays with the walk;
- fp32 asked for written into a factory's tensor at a slice (``pe[:, 0::2] =
  torch.exp(pos)``) is a copy into that tensor's own dtype: the factory's tensor is
  followed on (a write at tensor indices, which raises in half, still ends it).

Each "not reported" test fails on the rules before this round; the siblings asserted
beside them are reported on both, and the dtype claims are checked with torch.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from support.lint_models import Snippets

HEAD = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n"
LINT = Snippets(HEAD)
_found, _model = LINT.found, LINT.model


def _at(body: str, snippet: str, nth: int = 0) -> int:
    """The line of ``body`` (as :func:`_found` counts) holding ``snippet`` the nth time."""
    lines = [i for i, t in enumerate(textwrap.dedent(body).splitlines(), 1) if snippet in t]
    return lines[nth]


DECAYED = """
def decayed(q, k, mask):
    scores = torch.matmul(q, k.transpose(-2, -1))
    with torch.no_grad():
        probs = F.softmax(scores, dim=-1) * mask.float()
        total = torch.sum(probs, dim=-1, keepdim=True)
        spread = torch.clamp(total - torch.cumsum(probs, dim=-1), min=0.0).sqrt()
    effect = torch.clamp((spread * -1.0).exp(), max=1e5)
    scores = scores * effect
    scores.masked_fill_(mask == 0, -1e32)
    scores = F.softmax(scores, dim=-1)
    pad = torch.zeros(q.shape[0], 1, k.shape[1])
    return torch.cat([pad, scores[:, 1:, :]], dim=1)


def plain(q, k, mask):
    scores = torch.matmul(q, k.transpose(-2, -1))
    probs = F.softmax(scores, dim=-1)
    total = torch.sum(probs, dim=-1, keepdim=True)
    scores = scores * torch.clamp((total * -1.0).exp(), max=1e5)
    pad = torch.zeros(q.shape[0], 1, k.shape[1])
    return torch.cat([pad, scores[:, 1:, :]], dim=1)


class Decay(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 4)

    def forward(self, x, mask):
        return decayed(self.q(x), self.q(x), mask) + plain(self.q(x), self.q(x), mask)
"""


REDUCED = """
class Reduced(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, mask):
        h = self.proj(x)
        whole = (h * mask.float()).sum()
        return torch.ones(h.shape) * whole + h
"""


def test_fp32_asked_for_is_kept_through_elementwise_ops_and_reductions() -> None:
    found = _found(DECAYED)
    assert (_at(DECAYED, "pad = torch.zeros"), "HP101") not in found
    assert (_at(DECAYED, "max=1e5"), "HP301") not in found
    assert (_at(DECAYED, "-1e32"), "HP301") not in found
    assert (_at(DECAYED, "pad = torch.zeros", 1), "HP101") in found  # scores half there
    q = torch.ones(2, 3, 4, dtype=torch.half)
    mask = torch.ones(2, 3, 3, dtype=torch.bool)
    probs = F.softmax(q @ q.transpose(-2, -1), dim=-1) * mask.float()
    spread = torch.clamp(probs.sum(-1, keepdim=True) - probs.cumsum(-1), min=0.0).sqrt()
    assert (q @ q.transpose(-2, -1) * (spread * -1.0).exp()).dtype == torch.float32
    # a full reduction of fp32 asked for is 0-dim: it keeps a half operand half
    assert (_at(REDUCED, "torch.ones"), "HP101") in _found(REDUCED)
    h = torch.ones(2, 4, dtype=torch.half)
    assert (h + (h * torch.ones(2, 4).float()).sum()).dtype == torch.half


DIVIDED = """
class Averaged(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.cell = nn.GRUCell(12, 4)
        self.score = nn.Linear(12, 1)

    def forward(self, ids, aspect_ids):
        count = torch.sum(aspect_ids != 0, dim=-1).float()
        aspect = torch.div(torch.sum(self.embed(aspect_ids), dim=1), count.unsqueeze(-1))
        memory = self.embed(ids).float()
        state = torch.zeros_like(aspect)
        b, n = ids.shape
        for _ in range(2):
            joined = torch.cat(
                [memory, torch.zeros(b, n, 4) + state.unsqueeze(1), torch.zeros(b, n, 4)
                 + aspect.unsqueeze(1)], dim=-1)
            weights = F.softmax(self.score(joined), dim=1)
            state = self.cell(torch.bmm(weights.transpose(1, 2), joined).squeeze(1), state)
        return state


class Summed(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)

    def forward(self, ids):
        aspect = torch.sum(self.embed(ids), dim=1)
        return torch.zeros(aspect.shape) + aspect
"""


def test_a_division_by_fp32_asked_for_and_a_layer_it_would_raise_in() -> None:
    found = _found(DIVIDED)
    assert (_at(DIVIDED, "[memory, torch.zeros"), "HP101") not in found  # the state
    assert (_at(DIVIDED, "+ aspect.unsqueeze(1)"), "HP101") not in found
    assert (_at(DIVIDED, "torch.zeros(aspect.shape)"), "HP101") in found
    ids = torch.ones(2, 3, dtype=torch.long)
    count = torch.sum(ids != 0, dim=-1).float()
    h = torch.ones(2, 4, dtype=torch.half)
    assert torch.div(h, count.unsqueeze(-1)).dtype == torch.float32
    assert torch.zeros_like(torch.div(h, count.unsqueeze(-1))).dtype == torch.float32
    for dtype in (torch.float16, torch.bfloat16):  # the half cell raises on the fp32 input
        for layer in (nn.GRUCell(4, 4), nn.Linear(4, 4), nn.LSTMCell(4, 4)):
            with pytest.raises(RuntimeError, match="dtype"):
                layer.to(dtype)(torch.ones(2, 4))


PROJECTED = """
def project(points, normal, offset):
    t, w = points, normal.clone()
    r = torch.max(t / w, (t - 1) / w).clamp(min=-1e12, max=1e12)
    r.masked_fill_(w.abs() < 1e-8, 1e12)
    d = -(r * w)
    d[r > 0] = d[r > 0] * 0.5
    return d.sum(1) - offset


def project_half(points, normal):
    return (points / normal).clamp(min=-1e12)


class Attack(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, x):
        x = x.detach().clone().float()
        w = self.net(x.half()).float()
        found = project(torch.cat((x, x), 0), torch.cat((w, w), 0), 1.0)
        return found + project_half(self.net(x.half()), self.net(x.half())).sum(1)
"""


def test_hp301_in_a_helper_every_call_passes_fp32_asked_for() -> None:
    found = _found(PROJECTED, "HP3")
    assert (_at(PROJECTED, "min=-1e12, max=1e12"), "HP301") not in found
    assert (_at(PROJECTED, "1e12)"), "HP301") not in found
    assert (_at(PROJECTED, "(points / normal).clamp"), "HP301") in found
    with pytest.raises(RuntimeError, match="overflow"):
        torch.ones(2, dtype=torch.half).clamp(min=-1e12)


BUFFERS = """
class Search(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, x):
        x = x.float()
        best = 1e10 * torch.ones([x.shape[0]]).to(x.device)
        dist = (self.net(x.half()).float() - x).norm(dim=1)
        better = dist < best
        best[better] = torch.minimum(dist[better], best[better])
        return x * (dist < best).float().unsqueeze(1)


class Written(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, x):
        out = self.net(x)
        out[:, 0] = 1e10 * torch.ones([x.shape[0]])
        return out
"""


def test_hp301_written_into_a_buffer_of_fp32_factories_is_not_reported() -> None:
    found = _found(BUFFERS, "HP3")
    assert (_at(BUFFERS, "best = 1e10"), "HP301") not in found
    assert (_at(BUFFERS, "out[:, 0] = 1e10"), "HP301") in found  # lands in the half out
    best = 1e10 * torch.ones(3)
    best[best > 0] = torch.ones(3, dtype=torch.half)[best > 0].float()
    assert best.dtype == torch.float32


MASKED = """
class Saturate(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def fill(self, x, above, below):
        x[above] = torch.tensor(float("inf"))
        x[below] = torch.tensor(float("-inf"))
        return x

    def forward(self, x, limit):
        y = self.net(x)
        above, below = y > limit, y < -limit
        return self.fill(y.clamp(-limit, limit), above, below)


class Picked(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, x):
        y = self.net(x).flatten()
        y[torch.argmax(y)] = torch.tensor(2.5)
        return y
"""


def test_a_0_dim_tensor_written_at_a_boolean_mask_is_a_masked_fill() -> None:
    found = _found(MASKED, "HP1")
    assert (_at(MASKED, 'torch.tensor(float("inf"))'), "HP101") not in found
    assert (_at(MASKED, 'torch.tensor(float("-inf"))'), "HP101") not in found
    assert (_at(MASKED, "torch.tensor(2.5)"), "HP101") in found  # index_put_: raises
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.ones(4, dtype=dtype)
        x[x > 0] = torch.tensor(float("inf"))
        assert x.dtype == dtype and bool(torch.isinf(x).all())
        with pytest.raises(RuntimeError, match="Index put requires"):
            x[torch.tensor([0, 2])] = torch.tensor(2.5)


SCORED = """
class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.unary = nn.Linear(4, 1)

    def top(self, scores, k):
        picked = torch.topk(scores, k, dim=1).indices
        return picked, torch.gather(scores, 1, picked)

    def pair_scores(self, emb, arg_scores):
        pair = self.unary(emb).squeeze(-1)
        lifted, = (arg_scores.unsqueeze(2),)
        pair = pair.unsqueeze(2) + lifted
        dummy = torch.zeros(pair.shape)
        return torch.cat([dummy, pair], 2)

    def forward(self, emb, mask):
        scores = self.unary(emb).squeeze(-1) + torch.log(mask.to(torch.float))
        _, arg_scores = self.top(scores, 2)
        return self.pair_scores(emb[:, :2], arg_scores) + shifted(emb, 2, shift=len(emb))


def shifted(emb, n: int, shift: int = 0):
    return emb[:, :n] + (shift + torch.arange(n)).unsqueeze(-1) / n
"""


def test_fp32_asked_for_through_a_helpers_tuple_and_a_parameter() -> None:
    found = _found(SCORED)
    assert (_at(SCORED, "dummy = torch.zeros"), "HP101") not in found
    assert (_at(SCORED, "(shift + torch.arange(n))"), "HP101") in found  # shift: int
    found = _found(BRANCHED)  # fp32 asked for on one path only: the half input reaches too
    assert (_at(BRANCHED, "alpha = torch.zeros"), "HP101") in found


BRANCHED = """
class Lattice(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        acts = self.head(x)
        if not acts.is_cuda and acts.dtype == torch.float16:
            acts = acts.float()
        return self.walk(torch.log_softmax(acts, -1))

    def walk(self, acts):
        alpha = torch.zeros(acts.shape)
        return alpha + acts
"""


TABLE = """
class Table(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        pos = torch.arange(0, x.shape[1], dtype=torch.float).unsqueeze(1)
        pe = torch.zeros(x.shape[1], 4)
        pe[:, 0::2] = torch.exp(pos * -0.5)
        pe[:, 1::2] = torch.exp(pos * -0.25)
        return self.proj(x) + pe
"""


def test_fp32_asked_for_written_at_a_slice_leaves_the_factorys_tensor_followed() -> None:
    assert (_at(TABLE, "pe = torch.zeros"), "HP101") in _found(TABLE)
    pe = torch.zeros(3, 4, dtype=torch.half)
    pe[:, 0::2] = torch.exp(torch.arange(0, 3, dtype=torch.float).unsqueeze(1) * -0.5)
    assert pe.dtype == torch.half  # made half, the table stays half
