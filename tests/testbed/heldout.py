"""Held-out hazards (issue 21): small models, each built on one pattern from real model
code that breaks in half precision, and none of them in halfprec's own tuning suite.

Every :class:`~testbed.hazards.Hazard` here builds a seeded model in eval mode
and at least two seeded batches; where the pattern has a range, the last batch exercises
a different one (longer sequences, larger positions, another scene). ``culprit`` names
the module that holds the hazard ("" for the root). :data:`CONTROL` names a plain MLP
that is fine in half.
No module name contains "norm", so convert's name rule does not hide a hazard.
Used by benchmarks/heldout.py and tests/testbed/test_heldout.py.
"""

from __future__ import annotations

import torch
from torch import nn

from testbed import heldout_handoff as handoff
from testbed import heldout_ops as ops
from testbed import heldout_ranges as ranges
from testbed import heldout_sums as sums
from testbed.hazards import Hazard
from testbed.heldout_base import floats, mlp

__all__ = ["HELDOUT", "CONTROL"]

CONTROL = "control-mlp"


class Control(nn.Module):
    """A plain MLP on unit-scale inputs: fine in half."""

    def __init__(self) -> None:
        super().__init__()
        self.body = mlp(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


HELDOUT: dict[str, Hazard] = {
    h.name: h
    for h in (
        Hazard(
            "one-pass-variance", "var = E[x^2] - E[x]^2 on readings near 40", sums.variance, "scale"
        ),
        Hazard("long-sum-pooling", "masked mean pooling over 4096 tokens", sums.long_sum, "pool"),
        Hazard(
            "cumsum-box-filter",
            "cumsum box filter over 4096 steps",
            sums.cumsum,
            "box",
        ),
        Hazard("lse-no-max", "log(sum(exp(r * x))) without the max", sums.lse, "pool"),
        Hazard("gram-overflow", "style Gram matrix F @ F^T before / (C*H*W)", sums.gram, "gram"),
        Hazard(
            "entropy-underflow",
            "-sum(p * log p) of sharp softmax probabilities",
            floats(sums.ConfidentClassifier, 36, (16, 16), (1.0, 1.0, 1.5)),
            "entropy",
        ),
        Hazard(
            "tiny-temperature",
            "cosine logits over a learned temperature of 1e-3",
            floats(sums.ClusterAssigner, 44, (16, 16), (1.0, 1.0, 4.0)),
            "head",
        ),
        Hazard(
            "learned-input-scale",
            "x * a learned 1e6 on readings near 1e-6",
            sums.photodiode,
            "scale",
            prevented_by_convert=True,
        ),
        Hazard(
            "rope-positions",
            "RoPE angles in the activation dtype, positions 2k to 32k",
            ranges.rope,
            "rotary",
        ),
        Hazard("fourier-features", "NeRF encoding of coordinates near 40", ranges.nerf, "encode"),
        Hazard("geo-coordinates", "(lat, lon) standardised in the model", ranges.geo, "pickup"),
        Hazard("linalg-solve", "closed-form ridge head with torch.linalg.solve", ops.ridge, "head"),
        Hazard("fft-complex", "FNO spectral convolution with complex weights", ops.fno, "spectral"),
        Hazard("cdist-prototypes", "prototype logits by torch.cdist", ops.protonet, "distance"),
        Hazard("euler-ode", "200 explicit Euler steps of a neural ODE", ranges.euler, ""),
        Hazard(
            "vq-argmin",
            "VQ codebook argmin, a parameterless quantiser with integer output",
            floats(ranges.Tokenizer, 45, (256, 16), (1.0, 1.0, 3.0)),
            "quantize",
        ),
        Hazard(
            "poincare-boundary",
            "Poincare distance, 1 - |u|^2 near 1e-4",
            ranges.pairs,
            "distance",
        ),
        Hazard(
            "halting-handoff",
            "PonderNet halting probability near 0.9999 handed to log(1 - p) in a sibling module",
            handoff.ponder,
            "step.going",
        ),
        Hazard(
            CONTROL,
            "a plain MLP (the control)",
            floats(Control, 47, (16, 16), (1.0, 1.0, 3.0)),
            "",
        ),
    )
}
