"""Tiny Hugging Face models of 24 architectures (1-2 layers, width 32, vocab 128).

Shared by the tests (``tests/support/hf_models.py``) and ``benchmarks/hf_matrix.py``: the
decoder-only LMs of issue 23 (Qwen2, Mistral, Phi3, Gemma2, Gemma3, GPT-NeoX, Falcon, OPT,
Mixtral, Qwen2-MoE, GPT-2, Llama), the encoder-decoders T5, BART and Whisper, and those of
issue 33: the vision, multimodal, audio and time-series models ViT, CLIP, Wav2Vec2 and
PatchTST, the state-space LMs Mamba2 and Jamba, the sliding-window Starcoder2 and the
grouped-GEMM MoEs OLMoE and DeepSeek-V3; built from configs with seeded random weights.
``context`` is the decoders' position limit; sliding-window architectures get a window of
``WINDOW`` tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["NAMES", "WINDOW", "build", "builders", "decoder"]

WINDOW = 16


def decoder(context: int = 64) -> dict[str, Any]:
    """A one-layer Llama-style decoder config (Llama, Mistral, Qwen2, ...)."""
    return {
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": context,
        "vocab_size": 128,
    }


_ENCDEC = {
    "encoder_layers": 1,
    "decoder_layers": 1,
    "d_model": 32,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "vocab_size": 128,
}


_VISION = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
_VISION = {**_VISION, "intermediate_size": 64, "image_size": 32, "patch_size": 8}


def modalities(tf: Any) -> dict[str, Callable[[], nn.Module]]:
    """The vision, multimodal, audio and time-series models (no decoding cache)."""
    text = {k: v for k, v in _VISION.items() if k not in ("image_size", "patch_size")}
    return {
        "vit": lambda: tf.ViTForImageClassification(tf.ViTConfig(**_VISION, num_labels=3)),
        "clip": lambda: tf.CLIPModel(
            tf.CLIPConfig(
                text_config={**text, "vocab_size": 128, "max_position_embeddings": 32},
                vision_config=_VISION,
                projection_dim=16,
            )
        ),
        "wav2vec2": lambda: tf.Wav2Vec2ForCTC(
            tf.Wav2Vec2Config(
                **text,
                conv_dim=(16, 16),
                conv_stride=(5, 2),
                conv_kernel=(10, 3),
                num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=2,
                vocab_size=32,
            )
        ),
        "patchtst": lambda: tf.PatchTSTForPrediction(
            tf.PatchTSTConfig(
                num_input_channels=3,
                context_length=32,
                prediction_length=8,
                patch_length=8,
                patch_stride=8,
                d_model=32,
                num_attention_heads=2,
                num_hidden_layers=1,
                ffn_dim=64,
            )
        ),
    }


def caches(tf: Any, context: int = 64) -> dict[str, Callable[[], nn.Module]]:
    """The LMs whose caches or experts are not plain key/value attention with dense MLPs."""
    d = decoder(context)
    two = {**d, "num_hidden_layers": 2}
    return {
        "mamba2": lambda: tf.Mamba2ForCausalLM(
            tf.Mamba2Config(
                num_hidden_layers=1,
                hidden_size=32,
                state_size=8,
                num_heads=4,
                head_dim=16,
                n_groups=1,
                expand=2,
                vocab_size=128,
                chunk_size=16,
            )
        ),
        "jamba": lambda: tf.JambaForCausalLM(
            tf.JambaConfig(
                **two,
                attn_layer_period=2,
                attn_layer_offset=1,
                expert_layer_period=2,
                expert_layer_offset=1,
                num_experts=2,
                mamba_d_state=8,
                mamba_d_conv=4,
                mamba_expand=2,
                mamba_dt_rank=4,
                use_mamba_kernels=False,
            )
        ),
        "starcoder2": lambda: tf.Starcoder2ForCausalLM(
            tf.Starcoder2Config(**d, sliding_window=WINDOW)
        ),
        "olmoe": lambda: tf.OlmoeForCausalLM(
            tf.OlmoeConfig(**d, num_experts=4, num_experts_per_tok=2)
        ),
        "deepseek-v3": lambda: tf.DeepseekV3ForCausalLM(
            tf.DeepseekV3Config(
                **two,
                first_k_dense_replace=1,
                n_routed_experts=4,
                num_experts_per_tok=2,
                n_group=1,
                topk_group=1,
                moe_intermediate_size=32,
                q_lora_rank=16,
                kv_lora_rank=16,
                qk_rope_head_dim=8,
                qk_nope_head_dim=8,
                v_head_dim=16,
            )
        ),
    }


def builders(tf: Any, context: int = 64) -> dict[str, Callable[[], nn.Module]]:
    """Constructors by name, for the transformers module ``tf``."""
    d = decoder(context)
    two = {**d, "num_hidden_layers": 2, "head_dim": 16, "sliding_window": WINDOW}
    small = {k: d[k] for k in ("hidden_size", "num_attention_heads", "vocab_size")}
    small = {**small, "num_hidden_layers": 1, "max_position_embeddings": context}
    moe = {**d, "num_experts_per_tok": 2}
    return {
        "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**d)),
        "mistral": lambda: tf.MistralForCausalLM(tf.MistralConfig(**d, sliding_window=WINDOW)),
        "phi3": lambda: tf.Phi3ForCausalLM(tf.Phi3Config(**d, pad_token_id=0)),
        "gemma2": lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(**two)),
        "gemma3": lambda: tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(**two)),
        "gpt-neox": lambda: tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(**small, intermediate_size=64)),
        "falcon": lambda: tf.FalconForCausalLM(tf.FalconConfig(**small)),
        "opt": lambda: tf.OPTForCausalLM(tf.OPTConfig(**small, ffn_dim=64, word_embed_proj_dim=32)),
        "mixtral": lambda: tf.MixtralForCausalLM(tf.MixtralConfig(**moe, num_local_experts=4)),
        "qwen2-moe": lambda: tf.Qwen2MoeForCausalLM(
            tf.Qwen2MoeConfig(
                **moe, num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=32
            )
        ),
        "gpt2": lambda: tf.GPT2LMHeadModel(
            tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=context, vocab_size=128)
        ),
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**d)),
        "t5": lambda: tf.T5ForConditionalGeneration(
            tf.T5Config(
                num_layers=1,
                num_decoder_layers=1,
                d_model=32,
                d_ff=64,
                d_kv=16,
                num_heads=2,
                decoder_start_token_id=0,
                vocab_size=128,
            )
        ),
        "bart": lambda: tf.BartForConditionalGeneration(
            tf.BartConfig(max_position_embeddings=context, **_ENCDEC)
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
                **_ENCDEC,
            )
        ),
        **modalities(tf),
        **caches(tf, context),
    }


NAMES = (
    "qwen2", "mistral", "phi3", "gemma2", "gemma3", "gpt-neox", "falcon", "opt",
    "mixtral", "qwen2-moe", "gpt2", "llama", "t5", "bart", "whisper",
    "vit", "clip", "wav2vec2", "patchtst",
    "mamba2", "jamba", "starcoder2", "olmoe", "deepseek-v3",
)  # fmt: skip


def build(name: str, context: int = 64) -> nn.Module:
    """Model ``name`` with weights from seed 0, in eval mode."""
    import transformers as tf

    torch.manual_seed(0)
    return builders(tf, context)[name]().eval()
