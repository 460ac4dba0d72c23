"""``benchmarks/lint_corpus.py`` keys a site by the column the lint reports: characters, not
the UTF-8 bytes ``ast`` counts, so a finding after a non-ASCII name is one site, not two."""

from __future__ import annotations

import runpy
from pathlib import Path

from halfprec.leaks.lint import LintConfig, lint_paths
from support import ROOT

SOURCE = """import torch
from torch import nn


class Step(nn.Module):
    def forward(self, x):
        batch_γ = x.shape[0]; t = torch.rand(batch_γ)
        return x * t[:, None]
"""


def test_a_site_after_a_non_ascii_name_has_the_lint_s_column(tmp_path: Path) -> None:
    plain_sites = runpy.run_path(str(ROOT / "benchmarks" / "lint_corpus.py"))["plain_sites"]
    path = tmp_path / "step.py"
    path.write_text(SOURCE, encoding="utf-8")
    found = {(f.line, f.col) for f in lint_paths([tmp_path], LintConfig()).findings}
    sites = {(line, col) for _, line, col in plain_sites(tmp_path, path)}
    assert sites == {(7, SOURCE.splitlines()[6].index("torch.rand") + 1)}
    assert sites <= found
