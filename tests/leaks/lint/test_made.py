"""A module built inside ``forward`` is made after the model's conversion, so nothing in it is
half: an fp32 tensor it is called on comes out fp32 and goes on (see
:mod:`halfprec.leaks.lint.made`). Each model here is small and written for this test; the
torch checks show what the model does in half."""

from __future__ import annotations

import pytest
import torch

from support.lint_models import hp101_lines, model_class

SMOOTHED = """\
    class Smooth(nn.Module):
        def __init__(self, k):
            super().__init__()
            self.register_buffer("kernel", torch.ones(1, 1, k, k) / (k * k))

        def forward(self, x):
            return nn.functional.conv2d(x, self.kernel, padding=self.kernel.shape[-1] // 2)


    class Score(nn.Module):
        def forward(self, feats):
            score = torch.ones(feats[0].shape[0], 1, 4, 4, device=feats[0].device)
            for f in feats:
                score *= f.mean(1, keepdim=True)
            smooth = Smooth(3).to(feats[0].device)
            return smooth(score)
    """


def test_a_map_returned_through_a_module_made_in_forward_is_reported() -> None:
    model = model_class(SMOOTHED, "Score")().half()
    feats = [torch.randn(2, 3, 4, 4).half() for _ in range(2)]
    assert model(feats).dtype == torch.float32
    assert hp101_lines(SMOOTHED) == [12]


def test_a_module_made_in_forward_and_cast_there_is_left_to_the_other_rules() -> None:
    cast = SMOOTHED.replace(".to(feats[0].device)", ".to(feats[0].dtype)")
    assert hp101_lines(cast) == []


HEAT = """\
    class Heat(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Conv2d(1, d, 1)

        def forward(self, x):
            heat = torch.zeros(x.shape[0], 1, x.shape[2], x.shape[3], device=x.device)
            heat += x.mean(1, keepdim=True)
            pool = nn.AvgPool2d(3, 1, 1)
            return self.proj(pool(heat))
    """


def test_a_map_through_a_pooling_layer_made_in_forward_into_a_conv_is_reported() -> None:
    model = model_class(HEAT, "Heat")(2).half()
    with pytest.raises(RuntimeError):  # the fp32 map into the half conv
        model(torch.randn(1, 3, 4, 4).half())
    assert hp101_lines(HEAT) == [7]


def test_a_map_through_a_layer_made_and_called_at_once_is_reported() -> None:
    body = HEAT.replace("pool(heat)", "nn.Upsample(scale_factor=2.0)(heat)")
    model = model_class(body, "Heat")(2).half()
    with pytest.raises(RuntimeError):
        model(torch.randn(1, 3, 4, 4).half())
    assert hp101_lines(body) == [7]


def test_a_map_cast_after_the_module_made_in_forward_stays_silent() -> None:
    assert hp101_lines(HEAT.replace("pool(heat)", "pool(heat).to(x.dtype)")) == []
