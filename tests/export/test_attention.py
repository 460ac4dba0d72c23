"""Attention rows whose mask hides every key: the ONNX file computes what PyTorch does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from halfprec.export import export
from halfprec.export.attention import aten_masked_rows


class Attend(nn.Module):
    """Self-attention under a sliding window of 2 over right-padded rows: the last
    queries of the padded row see only padding, a fully masked row."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        i = torch.arange(n)
        window = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 2)
        mask = window[None, None] & attention_mask[:, None, None, :].bool()
        h = self.proj(x)[:, None]
        out = nn.functional.scaled_dot_product_attention(h, h, h, attn_mask=mask)
        return self.proj(out[:, 0])


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 2:] = 0  # queries 4 and 5 of row 1 see only padding
    return {"x": torch.randn(2, 6, 8, generator=gen), "attention_mask": mask}


def test_the_mode_is_exact_in_pytorch() -> None:
    model = Attend().eval()
    with torch.no_grad():
        want = model(**_batch())
        with aten_masked_rows():
            got = model(**_batch())
    assert torch.equal(got, want)


@pytest.mark.slow
def test_fully_masked_attention_rows_export_to_onnx_as_pytorch_computes_them(
    tmp_path: Path,
) -> None:
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    result = export(Attend().eval(), [_batch()], tmp_path / "a.onnx", "fp16", runs=0)
    assert result.passed, result.comparison.problems
