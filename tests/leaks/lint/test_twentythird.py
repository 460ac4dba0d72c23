"""Round twenty-two's precision rules, from the false alarms judged at the round's start
(docs/leaks.md; issue 41), each on small models written for this test, none copied from a
library:

- a module the model holds, called only on fp32 the library asks for, hands back fp32
  (:mod:`.fed`); so does a helper that returns its input rearranged, judged at the call
  by the argument it is given, also a method named like a tensor's (``self.reshape``).

Each "not reported" test fails on the rules before this round; the siblings asserted beside
them stay reported on both, and the dtype claims are checked with torch.
"""

from __future__ import annotations

import torch

from support.lint_models import HEAD_F, Snippets

LINT = Snippets(HEAD_F)
_found, _model, _at = LINT.found, LINT.model, LINT.line_of


KERNELS = """
class Affinity(nn.Module):
    def __init__(self, temperature=0.5):
        super().__init__()
        self.temperature = temperature

    def forward(self, a, b):
        sim = torch.bmm(a, b.transpose(1, 2))
        return (sim / self.temperature).exp()


class Snapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, a, b):
        sim = torch.bmm(a, b.transpose(1, 2))
        return sim.to(self.scale.dtype) * self.scale


class Regression(nn.Module):
    def __init__(self, ridge=0.1):
        super().__init__()
        self.kernel = Affinity()
        self.proj = nn.Linear(4, 4)
        self.ridge = ridge

    def forward(self, x, y):
        v = self.proj(y)
        x, y = x.float(), y.float()
        kyy = self.kernel(y, y)
        kxy = self.kernel(x, y)
        noise = self.ridge * torch.eye(y.shape[1], device=y.device)[None]
        return kxy @ torch.linalg.solve(kyy + noise, v.float())


class Handed(nn.Module):
    def __init__(self, kernel, ridge=0.1):
        super().__init__()
        self.kernel = kernel(temperature=0.5)
        self.proj = nn.Linear(4, 4)
        self.ridge = ridge

    def forward(self, x, y):
        v = self.proj(y).float()
        y = y.float()
        noise = self.ridge * torch.eye(y.shape[1], device=y.device)[None]
        return torch.linalg.solve(self.kernel(y, y) + noise, v)


class Embedded(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x, onehot):
        hot = torch.from_numpy(onehot).float().to(x.device)
        e = self.embed(hot)
        return torch.cat([e, torch.zeros(e.shape[0], 2).to(x.device)], -1)

"""

REGRESSION = KERNELS[KERNELS.index("class Regression") : KERNELS.index("class Handed")]
# the kernel of the half inputs: half, and the eye upcasts it
KERNELS += (
    REGRESSION.replace("class Regression", "class HalfKernel")
    .replace("        x, y = x.float(), y.float()\n", "")
    .replace("return kxy @", "return kxy.float() @")
)
# a kernel that casts to its parameter's dtype, fed fp32: it hands back half
KERNELS += (
    REGRESSION.replace("class Regression", "class CastBack")
    .replace("Affinity()", "Snapped()")
    .replace("return kxy @", "return kxy.float() @")
)


def test_a_factory_meeting_a_module_fed_only_fp32_asked_for_is_not_reported() -> None:
    found = _found(KERNELS, "HP101")
    assert (_at(KERNELS, "torch.eye"), "HP101") not in found
    assert (_at(KERNELS, "torch.eye", 1), "HP101") not in found  # a kernel handed in
    # a layer with weights of torch's: its output is judged the model's dtype, as before
    assert (_at(KERNELS, "torch.zeros"), "HP101") in found
    # the kernel of half inputs is half: the eye upcasts it, as before
    assert (_at(KERNELS, "torch.eye", 2), "HP101") in found
    # a kernel that casts to its parameter's dtype hands back half
    assert (_at(KERNELS, "torch.eye", 3), "HP101") in found
    x, y = torch.randn(2, 3, 4).half(), torch.randn(2, 5, 4).half()
    out = _model(KERNELS, "Regression")().half()(x, y)
    assert out.dtype == torch.float32  # fp32 by the library's .float(), eye or not
    assert (torch.randn(2, 5, 5).float() + torch.eye(5, dtype=torch.half)).dtype == torch.float32
    handed = _model(KERNELS, "Handed")(_model(KERNELS, "Affinity")).half()
    assert handed(x, y).dtype == torch.float32
    assert _model(KERNELS, "HalfKernel")().half()(x, y).dtype == torch.float32  # the leak
    assert _model(KERNELS, "CastBack")().half()(x, y).dtype == torch.float32  # the leak


FLATTENED = """
class Mixer(nn.Module):
    def __init__(self, ridge=0.1):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)
        self.ridge = ridge

    def flat(self, t):
        return t.flatten(2).transpose(1, 2)

    def forward(self, x):
        f = self.flat(self.conv(x))
        z = self.flat(x.float())
        gram = torch.bmm(z, z.transpose(1, 2))
        return gram + self.ridge * torch.eye(z.shape[1], device=x.device), f

"""


# the same model with the helper named like a tensor's method: self.reshape(...) is a call
SHAPED = FLATTENED.replace("class Mixer", "class Shaped")
# the gram of the half convolution's output: the eye upcasts it
FLATTENED += FLATTENED.replace("class Mixer", "class HalfMixer").replace(
    "self.flat(x.float())", "f"
)
FLATTENED += SHAPED.replace("self.flat", "self.reshape").replace("def flat", "def reshape")


def test_a_helper_handing_back_its_input_is_judged_by_the_argument_at_the_call() -> None:
    found = _found(FLATTENED, "HP101")
    assert (_at(FLATTENED, "torch.eye"), "HP101") not in found
    assert (_at(FLATTENED, "torch.eye", 2), "HP101") not in found  # self.reshape: a method
    assert (_at(FLATTENED, "torch.eye", 1), "HP101") in found  # the gram of half values
    x = torch.randn(2, 4, 3, 3).half()
    for name in ("Mixer", "Shaped"):
        gram, f = _model(FLATTENED, name)().half()(x)
        assert gram.dtype == torch.float32 and f.dtype == torch.half
    assert _model(FLATTENED, "HalfMixer")().half()(x)[0].dtype == torch.float32
