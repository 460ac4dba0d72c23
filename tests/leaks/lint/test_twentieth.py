"""Round nineteen's precision rules, from the false alarms of blind freezes M and N
(docs/leaks.md; issue 41), each on small models written for this test, none copied from a
library:

- a factory's tensor made quantized (``torch.quantize_per_tensor``) before any floating op
  is not reported (:mod:`.quantized`);
- 0-dim elements of a one-dimensional fp32 table (``torch.logspace``), read at an integer
  index or one by one through ``zip``, keep half operands with dimensions half (torch's
  type promotion): not reported (:mod:`.elements`); with a 0-dim half operand they are;
- ``torch.tensor(x)`` of a parameter that every caller passes a half tensor copies it in
  its dtype: not "an integer tensor made fp32" (:mod:`.copied`);
- the lead's fourth ruling (b) where the value the factory's tensor meets is made from it
  and from fp32 the library asks for (``(z + a) * (1 - a)`` of ``z = h.float()``).

Each "not reported" test fails on the rules before this round; the siblings asserted
beside them are reported on both, and the dtype claims are checked with torch.
"""

from __future__ import annotations

import textwrap

import torch

from support.lint_models import Snippets

HEAD = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n"
LINT = Snippets(HEAD, prefix="HP1")
_found, _model = LINT.found, LINT.model


def _at(body: str, snippet: str, nth: int = 0) -> int:
    """The line of ``body`` (as :func:`_found` counts) holding ``snippet`` the nth time."""
    lines = [i for i, t in enumerate(textwrap.dedent(body).splitlines(), 1) if snippet in t]
    return lines[nth]


QUANTIZED = """
class Signed(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        out = self.proj(x)
        signs = torch.zeros(out.shape).uniform_(-1, 1).sign()
        signs = torch.quantize_per_tensor(signs, 0.1, 0, torch.quint8)
        return out, signs


class Unsigned(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        out = self.proj(x)
        signs = torch.zeros(out.shape).uniform_(-1, 1).sign()
        return out * signs
"""


def test_factory_made_quantized_first_is_not_reported() -> None:
    found = _found(QUANTIZED)
    assert (_at(QUANTIZED, "signs = torch.zeros"), "HP101") not in found
    assert (_at(QUANTIZED, "signs = torch.zeros", 1), "HP101") in found  # fp32 signs * half
    signs = torch.zeros(3).uniform_(-1, 1).sign()
    assert torch.quantize_per_tensor(signs, 0.1, 0, torch.quint8).dtype == torch.quint8


SCALES = """
class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, k: float = 1.0):
        outs = [self.proj(x), self.proj(x)]
        scales = torch.logspace(-1, 0, len(outs) + 1, device=x.device)
        scales = scales * k
        outs = [o * s for o, s in zip(outs, scales[: len(outs)])]
        mid = self.proj(x) * scales[len(outs)]
        return outs, mid


class Pooled(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        scales = torch.linspace(0.5, 1, 3)
        return self.proj(x).mean() * scales[1]


class Whole(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        scales = torch.linspace(0.5, 1, 4)
        return self.proj(x) * scales
"""


def test_elements_of_a_fp32_vector_with_half_tensors_are_not_reported() -> None:
    found = _found(SCALES)
    assert (_at(SCALES, "torch.logspace"), "HP101") not in found
    assert (_at(SCALES, "torch.linspace"), "HP101") in found  # times a 0-dim half mean
    assert (_at(SCALES, "torch.linspace", 1), "HP101") in found  # the whole vector
    x = torch.randn(2, 4).half()
    outs, mid = _model(SCALES, "Scaled")().half()(x)
    assert mid.dtype == torch.float16 and all(o.dtype == torch.float16 for o in outs)
    assert _model(SCALES, "Pooled")().half()(x).dtype == torch.float32


COPIED = """
class Tukey(nn.Module):
    def __init__(self, power=0.5):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.power = power

    def forward(self, x):
        return self.proj(self.transform(self.proj(x)))

    def transform(self, feats):
        feats = torch.tensor(feats)
        if self.power == 0:
            return torch.log(feats)
        return torch.pow(feats, self.power)


class Counts(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x) * self.transform([1, 2, 3, 4])

    def transform(self, counts):
        counts = torch.tensor(counts)
        return torch.log(counts + 1)
"""


def test_tensor_of_a_half_tensor_every_caller_passes_is_not_reported() -> None:
    found = _found(COPIED)
    assert (_at(COPIED, "torch.tensor(feats)"), "HP101") not in found
    assert (_at(COPIED, "torch.tensor(counts)"), "HP101") in found  # integers made fp32
    x = torch.randn(2, 4).half()
    assert _model(COPIED, "Tukey")().half()(x.abs()).dtype == torch.float16
    assert _model(COPIED, "Counts")().half()(x).dtype == torch.float32


BLENDED = """
class Blend(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return x - self.search(self.proj(x))

    def search(self, h):
        z = h.detach().float()
        a = torch.ones(z.shape)
        return (z + a) * (1 - a)


class Kept(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return x - self.search(self.proj(x))

    def search(self, h):
        z = h.detach()
        a = torch.ones(z.shape)
        return (z + a) * (1 - a)
"""


def test_factory_meeting_a_value_of_itself_and_asked_fp32_is_not_reported() -> None:
    found = _found(BLENDED)
    assert (_at(BLENDED, "torch.ones"), "HP101") not in found  # z is fp32 by .float()
    assert (_at(BLENDED, "torch.ones", 1), "HP101") in found  # z is half: the ones leak
    x = torch.randn(2, 4).half()
    assert _model(BLENDED, "Blend")().half()(x).dtype == torch.float32  # fp32 by z anyway
