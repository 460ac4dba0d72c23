"""Tiny Hugging Face models (1 layer a stack, width 32, vocab 128), saved with save_pretrained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def _builders(tf: Any) -> dict[str, Any]:
    small = {"vocab_size": 128}
    encdec = {
        "encoder_layers": 1,
        "decoder_layers": 1,
        "d_model": 32,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
    }
    return {
        "gpt2": lambda: tf.GPT2LMHeadModel(
            tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64, **small)
        ),
        "llama": lambda: tf.LlamaForCausalLM(
            tf.LlamaConfig(
                num_hidden_layers=1,
                hidden_size=32,
                intermediate_size=64,
                num_attention_heads=2,
                num_key_value_heads=2,
                max_position_embeddings=64,
                **small,
            )
        ),
        "t5": lambda: tf.T5ForConditionalGeneration(
            tf.T5Config(
                num_layers=1,
                num_decoder_layers=1,
                d_model=32,
                d_ff=64,
                d_kv=16,
                num_heads=2,
                decoder_start_token_id=0,
                **small,
            )
        ),
        "bart": lambda: tf.BartForConditionalGeneration(
            tf.BartConfig(max_position_embeddings=64, **encdec, **small)
        ),
        "whisper": lambda: tf.WhisperForConditionalGeneration(
            tf.WhisperConfig(
                num_mel_bins=16,
                max_source_positions=32,
                max_target_positions=32,
                pad_token_id=1,
                bos_token_id=2,
                eos_token_id=3,
                decoder_start_token_id=2,
                **encdec,
                **small,
            )
        ),
    }


def save(name: str, root: Path) -> Path:
    """Build model ``name`` with fixed seeds and ``save_pretrained`` it under ``root``."""
    import transformers as tf

    torch.manual_seed(0)
    model = _builders(tf)[name]()
    path = root / name
    model.save_pretrained(str(path))
    return path
