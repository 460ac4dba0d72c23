"""Branches: an fp32 accumulator that one branch of an ``if`` overwrites and the other adds
to may still be fp32 after the ``if``; a 0-dim placeholder never runs the body of an ``if``
that asks for dimensions (``t.ndim > 0``). Each model here is small and written for this
test; the torch checks show what the model does in half."""

from __future__ import annotations

import pytest
import torch

from support.lint_models import HEAD, Snippets

LINT = Snippets(HEAD)
_found, _module = LINT.lines, LINT.model


SUMMED = """\
    class Tower(nn.Module):
        def __init__(self, d, summed=True):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(d, d), nn.Linear(d, d)])
            self.summed = summed

        def forward(self, h):
            total = torch.zeros(h.shape, device=h.device)
            for block in self.blocks:
                h = block(h)
                if self.summed:
                    total += h
                else:
                    total = h
            return total
    """


def test_an_accumulator_one_branch_overwrites_is_reported() -> None:
    model = _module(SUMMED, "Tower")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float32
    assert _found(SUMMED) == [8]


def test_an_accumulator_rebound_from_itself_in_one_branch_is_reported() -> None:
    assert _found(SUMMED.replace("total += h", "total = total + h")) == [8]


def test_a_placeholder_both_branches_replace_stays_silent() -> None:
    both = """\
        class Pick(nn.Module):
            def __init__(self, d, wide=True):
                super().__init__()
                self.proj = nn.Linear(d, d)
                self.wide = wide

            def forward(self, h):
                out = torch.zeros(h.shape, device=h.device)
                if self.wide:
                    out = self.proj(h)
                else:
                    out = h * 2
                return out
        """
    assert _found(both) == []


RANKED = """\
    class Solve(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x, step=None):
            if step is None:
                step = torch.tensor(0.0, device=x.device)
                given = False
            else:
                given = True
            y = self.proj(x)
            if step.ndim > 0:
                step = step.view([step.size(0)] + [1] * (x.ndim - 1))
            if given:
                y = y + x / step
            return y
    """


@pytest.mark.parametrize("test", ["step.ndim > 0", "step.dim() >= 1", "len(step.shape) != 0"])
def test_a_0_dim_placeholder_read_only_for_its_rank_stays_silent(test: str) -> None:
    model = _module(RANKED, "Solve")(4).half()
    assert model(torch.randn(2, 4).half()).dtype == torch.float16
    assert _found(RANKED.replace("step.ndim > 0", test)) == []


def test_a_placeholder_with_dimensions_under_the_same_test_is_reported() -> None:
    sized = RANKED.replace("torch.tensor(0.0, device=x.device)", "torch.ones(1, device=x.device)")
    model = _module(sized, "Solve")(4).half()
    assert model(torch.randn(2, 4).half(), None).dtype == torch.float16  # given is False
    assert _found(sized.replace("if given:", "if True:")) == [8]


def test_a_0_dim_placeholder_returned_after_the_rank_test_is_reported() -> None:
    returned = RANKED.replace("step = step.view(", "y = y * step.view(")
    returned = returned.replace("return y", "return y, step")
    model = _module(returned, "Solve")(4).half()
    assert model(torch.randn(2, 4).half())[1].dtype == torch.float32
    assert _found(returned) == [8]


LEVELS = """\
    class Denoise(nn.Module):
        def __init__(self, c, floor=0.01):
            super().__init__()
            self.floor = floor
            self.head = nn.Conv2d(c + 1, c, 3, padding=1)

        def levels(self, sigma, scale):
            if sigma is None:
                sigma = self.floor * torch.ones(scale.size(0), device=scale.device)
            if isinstance(sigma, list):
                sigma = sigma[0].abs().max()
            return sigma, scale

        def as_map(self, value, x):
            return value.view(x.size(0), 1, 1, 1).expand(-1, 1, x.size(2), x.size(3))

        def forward(self, y, sigma=None):
            scale = y.abs().reshape(y.size(0), -1).amax(dim=1)
            sigma, scale = self.levels(sigma, scale)
            sigma = torch.maximum(sigma, torch.tensor(self.floor, device=y.device))
            return self.head(torch.cat((y, self.as_map(sigma, y)), 1))
    """


def test_a_level_a_branch_may_reduce_is_followed_into_the_cat() -> None:
    model = _module(LEVELS, "Denoise")(3).half()
    with pytest.raises(RuntimeError, match="type"):
        model(torch.randn(2, 3, 8, 8).half())  # the conv meets the fp32 cat
    assert _found(LEVELS) == [9]


def test_a_level_cast_under_a_dtype_test_stays_silent() -> None:
    guarded = LEVELS.replace("if isinstance(sigma, list):", "if sigma.dtype != scale.dtype:")
    guarded = guarded.replace("sigma = sigma[0].abs().max()", "sigma = sigma.to(scale.dtype)")
    assert "sigma.to(scale.dtype)" in guarded
    model = _module(guarded, "Denoise")(3).half()
    assert model(torch.randn(2, 3, 8, 8).half()).dtype == torch.float16
    assert _found(guarded) == []
