"""Only the checks whose codes are enabled run: HP2's check (an upcast, whose every tensor is
then followed) only when HP2 is selected. The findings of the enabled codes are those of a
run of every check."""

from __future__ import annotations

from halfprec.leaks.lint import LintConfig, lint_source
from halfprec.leaks.lint.casts import check_casts
from halfprec.leaks.lint.constants import check_constants
from halfprec.leaks.lint.engine import checks_for
from halfprec.leaks.lint.factories import check_factory

_SOURCE = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x, mask):
        h = self.proj(x)
        s = h.float().softmax(-1)
        x = x.masked_fill(mask, -1e9)
        h = h + torch.ones(h.shape[-1])
        return h + s + x
"""


def test_checks_run_only_for_enabled_codes() -> None:
    assert checks_for(frozenset({"HP101", "HP301"})) == [check_factory, check_constants]
    assert checks_for(frozenset({"HP201"})) == [check_casts]
    assert checks_for(frozenset({"HP101", "HP202", "HP302"})) == [
        check_factory,
        check_casts,
        check_constants,
    ]
    assert checks_for(frozenset()) == []


def _found(config: LintConfig) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(_SOURCE, "block.py", config)]


def test_the_enabled_codes_find_what_every_check_finds() -> None:
    every = _found(LintConfig(select=("HP",)))
    assert {code for _, code in every} == {"HP101", "HP201", "HP301"}
    for select in [("HP1", "HP3"), ("HP1",), ("HP2",), ("HP3",), ("HP1", "HP2")]:
        kept = [f for f in every if f[1].startswith(select)]
        assert _found(LintConfig(select=select)) == kept, select
