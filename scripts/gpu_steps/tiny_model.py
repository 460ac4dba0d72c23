"""A 2-layer BERT of width 32 with random weights: the dry run's stand-in for BERT-base
and MiniLM, also a MODEL spec for the CLI (``scripts/gpu_steps/tiny_model.py:tiny_bert``)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["tiny_bert", "tiny_bert_example_inputs"]


def tiny_bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return BertModel(config).eval()


def tiny_bert_example_inputs() -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [
        {
            "input_ids": torch.randint(0, 100, (2, 16), generator=gen),
            "attention_mask": torch.ones(2, 16, dtype=torch.long),
        }
        for _ in range(2)
    ]
