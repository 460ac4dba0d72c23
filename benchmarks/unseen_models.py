"""Models built from transformers configs (random weights) that no one tuned halfprec on.

MODEL specs for the benchmark scripts, e.g.
``python3 benchmarks/verify_choice.py benchmarks/unseen_models.py:convnext``; each
``NAME()`` builds the model and ``NAME_example_inputs()`` its batch.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    AlbertConfig,
    AlbertModel,
    ASTConfig,
    ASTModel,
    BartConfig,
    BartModel,
    ConvNextConfig,
    ConvNextModel,
    DeiTConfig,
    DeiTModel,
    DistilBertConfig,
    DistilBertModel,
    ElectraConfig,
    ElectraModel,
    GPT2Config,
    GPT2Model,
    MobileViTConfig,
    MobileViTModel,
    RobertaConfig,
    RobertaModel,
    SegformerConfig,
    SegformerModel,
    SwinConfig,
    SwinModel,
    T5Config,
    T5EncoderModel,
    ViTConfig,
    ViTModel,
    Wav2Vec2Config,
    Wav2Vec2Model,
    WhisperConfig,
)
from transformers.models.whisper.modeling_whisper import WhisperEncoder


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


def whisper() -> Any:
    torch.manual_seed(0)
    config = WhisperConfig(d_model=512, encoder_layers=6, encoder_attention_heads=8)
    return WhisperEncoder(config).eval()  # whisper-base's encoder shape, 17M


def whisper_example_inputs() -> dict[str, torch.Tensor]:
    # 30 s of 80-bin log-mel frames, the length the encoder's positions are built for
    g = torch.Generator().manual_seed(0)
    return {"input_features": torch.randn(1, 80, 3000, generator=g)}


def t5() -> Any:
    torch.manual_seed(0)
    return T5EncoderModel(T5Config()).eval()  # t5-small's encoder shape, 35M


def t5_example_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 30000, (8, 128), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def roberta() -> Any:
    torch.manual_seed(0)
    return RobertaModel(RobertaConfig(), add_pooling_layer=False).eval()  # roberta-base, 124M


def roberta_example_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 50000, (8, 128), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def vit() -> Any:
    torch.manual_seed(0)
    return ViTModel(ViTConfig(), add_pooling_layer=False).eval()  # vit-base-patch16-224, 86M


def vit_example_inputs() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(8, 3, 224, 224, generator=torch.Generator().manual_seed(0))}


def wav2vec2() -> Any:
    torch.manual_seed(0)
    return Wav2Vec2Model(Wav2Vec2Config()).eval()  # wav2vec2-base shape, 94M


def wav2vec2_example_inputs() -> dict[str, torch.Tensor]:
    # 10 s of 16 kHz audio
    return {"input_values": torch.randn(1, 160000, generator=torch.Generator().manual_seed(0))}


def swin() -> Any:
    torch.manual_seed(0)
    return SwinModel(SwinConfig(), add_pooling_layer=False).eval()  # swin-tiny-patch4-window7, 28M


def swin_example_inputs() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(8, 3, 224, 224, generator=torch.Generator().manual_seed(0))}


def distilbert() -> Any:
    torch.manual_seed(0)
    return DistilBertModel(DistilBertConfig()).eval()  # distilbert-base-uncased shape, 66M


def distilbert_example_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (16, 128), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def gpt2() -> Any:
    torch.manual_seed(0)
    return GPT2Model(GPT2Config(use_cache=False)).eval()  # gpt2 (small) shape, 124M: prefill


def gpt2_example_inputs() -> dict[str, torch.Tensor]:
    # one prefill of 2 prompts of 128 tokens, no KV cache returned
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 50000, (2, 128), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def mobilevit() -> Any:
    torch.manual_seed(0)
    return MobileViTModel(MobileViTConfig(), expand_output=False).eval()  # mobilevit-small, 5M


def mobilevit_example_inputs() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 256, 256, generator=torch.Generator().manual_seed(0))}


def ast() -> Any:
    torch.manual_seed(0)
    # the Audio Spectrogram Transformer's AudioSet shape for 5.12 s of audio, 86M
    return ASTModel(ASTConfig(max_length=512)).eval()


def ast_example_inputs() -> dict[str, torch.Tensor]:
    # 5.12 s of 128-bin log-mel frames, the length its positions are built for
    g = torch.Generator().manual_seed(0)
    return {"input_values": torch.randn(1, 512, 128, generator=g)}


def bart() -> Any:
    torch.manual_seed(0)
    # bart-base's shape (6 encoder and 6 decoder layers of 768), 140M: encoder and decoder
    config = BartConfig(
        d_model=768,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        use_cache=False,
    )
    return BartModel(config).eval()


def bart_example_inputs() -> dict[str, torch.Tensor]:
    # 2 sequences of 128 tokens; the decoder reads them shifted (BartModel's default)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 50000, (2, 128), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def segformer() -> Any:
    torch.manual_seed(0)
    return SegformerModel(SegformerConfig()).eval()  # segformer-b0 (mit-b0) encoder, 3.3M


def segformer_example_inputs() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 512, 512, generator=torch.Generator().manual_seed(0))}


def albert() -> Any:
    torch.manual_seed(0)
    # albert-base-v2 shape, 11.7M: one layer's weights shared by all 12, so a call traces
    # as many operations as BERT-base's with a tenth of its parameters
    config = AlbertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072)
    return AlbertModel(config, add_pooling_layer=False).eval()


def albert_example_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (8, 128), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
