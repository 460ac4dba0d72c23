"""Tiny Hugging Face models (1 layer a stack, width 32, vocab 128), saved with save_pretrained.

The configs live in :mod:`testbed.hf_tiny` (shared with benchmarks/hf_matrix.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.hf_tiny import build as _build
from testbed.hf_tiny import decoder

# a one-layer Llama-style decoder (Llama, Mistral, ...) with a 64-token context
DECODER = decoder(64)


def build(name: str) -> Any:
    """Model ``name`` built with fixed seeds, in eval mode."""
    return _build(name)


def save(name: str, root: Path) -> Path:
    """Build model ``name`` with fixed seeds and ``save_pretrained`` it under ``root``."""
    model = build(name)
    path = root / name
    model.save_pretrained(str(path))
    return path


def save_tokenizer_without_pad(path: Path) -> None:
    """A real fast tokenizer with an eos token and no pad token, as GPT-2's and Llama's."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from halfprec.io.zoo import sentences

    words = {w for s in sentences() for w in s.lower().replace(".", " ").split()}
    vocab = {w: i for i, w in enumerate(["</s>", "<unk>", *sorted(words)[:100]])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    assert fast.pad_token is None
    fast.save_pretrained(str(path))
