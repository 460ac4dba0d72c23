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
