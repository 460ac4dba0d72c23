"""Models built from transformers configs (random weights) that no one tuned halfprec on.

MODEL specs for the benchmark scripts, e.g.
``python3 benchmarks/verify_choice.py benchmarks/unseen_models.py:convnext``; each
``NAME()`` builds the model and ``NAME_example_inputs()`` its batch.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    ConvNextConfig,
    ConvNextModel,
    DeiTConfig,
    DeiTModel,
    ElectraConfig,
    ElectraModel,
)


def electra() -> Any:
    torch.manual_seed(0)
    return ElectraModel(ElectraConfig()).eval()  # ELECTRA-small discriminator shape, 13.5M


def electra_example_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (16, 128), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def convnext() -> Any:
    torch.manual_seed(0)
    return ConvNextModel(ConvNextConfig()).eval()  # convnext-tiny shape, 28M


def convnext_example_inputs() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))}


def deit() -> Any:
    torch.manual_seed(0)
    config = DeiTConfig(hidden_size=384, num_attention_heads=6, intermediate_size=1536)
    return DeiTModel(config, add_pooling_layer=False).eval()  # deit-small shape, 21.7M


def deit_example_inputs() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(4, 3, 224, 224, generator=torch.Generator().manual_seed(0))}
