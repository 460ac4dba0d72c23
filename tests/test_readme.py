"""README's Python quick start runs as written, on a small real model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from support import ROOT

README = ROOT / "README.md"


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(nn.Linear(16, 16) for _ in range(2))
        self.norm = nn.LayerNorm(16)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.embed(input_ids)
        for layer in self.encoder.layer:  # type: ignore[union-attr]
            x = torch.relu(layer(x))
        return {"output": self.norm(x).mean(dim=1)}


def build_fp32_model() -> nn.Module:
    torch.manual_seed(0)
    return Encoder().eval()


def test_readme_python_quick_start_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no Python block"
    monkeypatch.chdir(tmp_path)
    model = build_fp32_model()
    inputs = [{"input_ids": torch.randint(0, 50, (4, 8))} for _ in range(2)]
    namespace = {"model": model, "inputs": inputs, "build_fp32_model": build_fp32_model}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # noqa: S102
    assert (tmp_path / "model.safetensors").exists()
    fresh = namespace["fresh"]
    assert next(fresh.encoder.layer[1].parameters()).dtype in (torch.float16, torch.bfloat16)
    assert model.training is False and next(model.parameters()).dtype == torch.float32
