"""``halfprec audit``: exit codes and JSON, through the real MODEL loader."""

from __future__ import annotations

import json
from pathlib import Path

from support.leaky import LEAKY, marked_leaks


# -- CLI, through the real MODEL loader -----------------------------------------------------
def test_cli_audit_exit_codes_and_json() -> None:
    from support.cli import run_cli

    found = run_cli("audit", f"{LEAKY}:upcast_model", "--json")
    assert found.returncode == 1, found.stderr
    data = json.loads(found.stdout)
    assert [(leak["kind"], leak["line"]) for leak in data["leaks"]] == [
        ("upcast", next(n for n, k in marked_leaks() if k == "upcast"))
    ]
    assert data["leaks"][0]["file"].endswith("leaky.py")
    table = run_cli("audit", f"{LEAKY}:upcast_model")
    assert table.returncode == 1 and "upcast" in table.stdout
    clean = run_cli("audit", "builtin:minilm", "--dtype", "bf16")
    assert clean.returncode == 0 and "no dtype leaks in bf16" in clean.stdout, clean.stderr
    bad = run_cli("audit", "builtin:minilm", "--dtype", "fp8")
    assert bad.returncode == 2 and "unknown dtype 'fp8'" in bad.stderr
    unknown = run_cli("audit", "nope")
    assert unknown.returncode == 2 and "unknown MODEL 'nope'" in unknown.stderr


_POSITIONS = """
import torch
from torch import nn


class Positions(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.pos = nn.Parameter(torch.randn(3, 8))
        self.proj = nn.Linear(8, 8)

    def forward(self, ids):
        return self.proj(self.embed(ids) + self.pos)


def model():
    torch.manual_seed(0)
    return Positions()


def model_example_inputs():
    return [torch.tensor([[1, 2, 3]])]
"""


def test_cli_audit_does_not_fail_on_what_the_recipe_causes(tmp_path: Path) -> None:
    """Issue 34: `embed + self.pos` was an "upcast" (exit 1) because convert's own default
    kept the small `pos` fp32. It is labelled with that field, and the exit code is 0."""
    from support.cli import run_cli

    spec = tmp_path / "positions.py"
    spec.write_text(_POSITIONS)
    table = run_cli("audit", f"{spec}:model", "--dtype", "fp16")
    assert table.returncode == 0, table.stdout + table.stderr
    assert "caused by the" in table.stdout  # the table's cells wrap; the JSON has the field
    letters = "".join(ch for ch in table.stdout if ch.isalnum() or ch in "_()")
    assert "1leak(s)(1causedbytherecipenotthecode)" in letters
    data = json.loads(run_cli("audit", f"{spec}:model", "--dtype", "fp16", "--json").stdout)
    assert data["problems"] == 0
    assert [leak["recipe_field"] for leak in data["leaks"]] == ["fp32_params_up_to"]
