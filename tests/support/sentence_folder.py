"""A tiny BERT in the sentence-transformers layout (modules.json, a pooling folder, a real
WordPiece tokenizer), for the convert and layout tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch

MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {
        "idx": 2,
        "name": "2",
        "path": "2_Normalize",
        "type": "sentence_transformers.models.Normalize",
    },
]
POOLING = {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]


def sentence_folder(where: Path, modules: list[dict[str, str | int]] = MODULES) -> Path:
    """A tiny BERT in the sentence-transformers layout, with a real WordPiece tokenizer."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    where.mkdir()
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(where)
    vocab = where / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(where)
    (where / "modules.json").write_text(json.dumps(modules))
    (where / "sentence_bert_config.json").write_text('{"max_seq_length": 32}')
    (where / "1_Pooling").mkdir()
    (where / "1_Pooling" / "config.json").write_text(json.dumps(POOLING))
    (where / "2_Normalize").mkdir()
    return where


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))
