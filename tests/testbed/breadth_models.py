"""Tiny transformers architectures from configs with seeded random weights, and their
"stressed" twins, for the breadth benchmark (benchmarks/breadth.py, tests/testbed/test_breadth.py).

Each :class:`Arch` builds one model (hidden 16-64, 1-2 layers) with transformers' own
classes and one small example batch. :func:`stressed` gives the twin with realistic
fp16 overflow: norm weights ~N(1, 0.5), biases ~N(0, 0.2), every Linear/Conv weight x8.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["Arch", "ARCHS", "arch", "build", "example_batch", "stressed", "KINDS"]

KINDS = ("text", "causal", "seq2seq", "vision", "audio")
VOCAB = 128
BATCH = 2
SEQ = 12
WEIGHT_SCALE = 8.0
NORM_STD = 0.5
BIAS_STD = 0.2

Builder = Callable[[Any], nn.Module]


@dataclass(frozen=True)
class Arch:
    """One architecture: ``build(transformers)`` returns the model, ``inputs`` says which
    example batch it takes (see :func:`example_batch`)."""

    name: str
    kind: str
    build: Builder
    inputs: str
    size: int = 32  # image side, or audio samples / 100

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")


# configs -------------------------------------------------------------------------------

_IDS: dict[str, Any] = {
    "vocab_size": VOCAB,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}
_ENCODER: dict[str, Any] = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}
_BERTLIKE: dict[str, Any] = {**_ENCODER, "max_position_embeddings": 64, "vocab_size": VOCAB}
_DECODER: dict[str, Any] = {
    **_ENCODER,
    "num_key_value_heads": 1,
    "max_position_embeddings": 64,
    "use_cache": False,
    **_IDS,
}
_ENCDEC: dict[str, Any] = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 64,
    "use_cache": False,
    "decoder_start_token_id": 0,
    **_IDS,
}
_VIT: dict[str, Any] = {**_ENCODER, "image_size": 32, "patch_size": 8}
_SPEECH: dict[str, Any] = {
    **_ENCODER,
    "conv_dim": (32, 32),
    "conv_stride": (5, 2),
    "conv_kernel": (10, 3),
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    "vocab_size": VOCAB,
}
# Conv nets with a BatchNorm after every layer vanish to 0 with the default std 0.02 at
# this width (BatchNorm in eval mode does not renormalize): ~1/sqrt(fan_in) keeps them alive
_WIDE_INIT = 0.15
_STAGES: dict[str, Any] = {"hidden_sizes": [16, 32], "depths": [1, 1]}


def _text(name: str, cls: str, cfg: str, **kw: Any) -> Arch:
    return Arch(name, "text", lambda tf: getattr(tf, cls)(getattr(tf, cfg)(**kw)), "text")


def _causal(name: str, cls: str, cfg: str, **kw: Any) -> Arch:
    return Arch(name, "causal", lambda tf: getattr(tf, cls)(getattr(tf, cfg)(**kw)), "text")


def _seq2seq(name: str, cls: str, cfg: str, **kw: Any) -> Arch:
    build: Builder = lambda tf: getattr(tf, cls)(getattr(tf, cfg)(**kw))  # noqa: E731
    return Arch(name, "seq2seq", build, "seq2seq")


def _vision(name: str, cls: str, cfg: str, size: int = 32, **kw: Any) -> Arch:
    build: Builder = lambda tf: getattr(tf, cls)(getattr(tf, cfg)(**kw))  # noqa: E731
    return Arch(name, "vision", build, "image", size)


def _audio(name: str, cls: str, cfg: str, inputs: str = "waveform", **kw: Any) -> Arch:
    build: Builder = lambda tf: getattr(tf, cls)(getattr(tf, cfg)(**kw))  # noqa: E731
    return Arch(name, "audio", build, inputs, 16)


ARCHS: tuple[Arch, ...] = (
    # text encoders
    _text("bert", "BertModel", "BertConfig", **_BERTLIKE),
    _text("roberta", "RobertaModel", "RobertaConfig", **_BERTLIKE),
    _text(
        "distilbert",
        "DistilBertModel",
        "DistilBertConfig",
        vocab_size=VOCAB,
        dim=32,
        n_layers=2,
        n_heads=2,
        hidden_dim=64,
        max_position_embeddings=64,
    ),
    _text("albert", "AlbertModel", "AlbertConfig", embedding_size=16, **_BERTLIKE),
    _text("electra", "ElectraModel", "ElectraConfig", embedding_size=32, **_BERTLIKE),
    _text("deberta-v2", "DebertaV2Model", "DebertaV2Config", **_BERTLIKE),
    _text("mpnet", "MPNetModel", "MPNetConfig", **_BERTLIKE),
    # causal language models
    _causal(
        "gpt2",
        "GPT2LMHeadModel",
        "GPT2Config",
        n_layer=2,
        n_embd=32,
        n_head=2,
        n_positions=64,
        use_cache=False,
        **_IDS,
    ),
    _causal(
        "gpt-neo",
        "GPTNeoForCausalLM",
        "GPTNeoConfig",
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        attention_types=[[["global", "local"], 1]],
        window_size=8,
        max_position_embeddings=64,
        use_cache=False,
        **_IDS,
    ),
    _causal("llama", "LlamaForCausalLM", "LlamaConfig", **_DECODER),
    _causal("mistral", "MistralForCausalLM", "MistralConfig", **_DECODER),
    _causal("qwen2", "Qwen2ForCausalLM", "Qwen2Config", **_DECODER),
    _causal("gemma", "GemmaForCausalLM", "GemmaConfig", head_dim=16, **_DECODER),
    _causal("phi", "PhiForCausalLM", "PhiConfig", **_DECODER),
    _causal(
        "opt",
        "OPTForCausalLM",
        "OPTConfig",
        hidden_size=32,
        ffn_dim=64,
        word_embed_proj_dim=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=64,
        use_cache=False,
        **_IDS,
    ),
    _causal(
        "bloom",
        "BloomForCausalLM",
        "BloomConfig",
        hidden_size=32,
        n_layer=2,
        n_head=2,
        use_cache=False,
        **_IDS,
    ),
    _causal(
        "falcon",
        "FalconForCausalLM",
        "FalconConfig",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        use_cache=False,
        **_IDS,
    ),
    # encoder-decoders
    _seq2seq(
        "t5",
        "T5ForConditionalGeneration",
        "T5Config",
        d_model=32,
        d_ff=64,
        d_kv=16,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        use_cache=False,
        decoder_start_token_id=0,
        **_IDS,
    ),
    _seq2seq("bart", "BartForConditionalGeneration", "BartConfig", **_ENCDEC),
    _seq2seq("mbart", "MBartForConditionalGeneration", "MBartConfig", **_ENCDEC),
    _seq2seq("pegasus", "PegasusForConditionalGeneration", "PegasusConfig", **_ENCDEC),
    _seq2seq("marian", "MarianMTModel", "MarianConfig", **_ENCDEC),
    # vision
    _vision("vit", "ViTModel", "ViTConfig", **_VIT),
    _vision("deit", "DeiTModel", "DeiTConfig", **_VIT),
    _vision("beit", "BeitModel", "BeitConfig", use_relative_position_bias=True, **_VIT),
    _vision("dinov2", "Dinov2Model", "Dinov2Config", **_VIT),
    _vision("convnext", "ConvNextModel", "ConvNextConfig", num_stages=2, **_STAGES),
    _vision("convnextv2", "ConvNextV2Model", "ConvNextV2Config", num_stages=2, **_STAGES),
    _vision(
        "swin",
        "SwinModel",
        "SwinConfig",
        image_size=32,
        patch_size=4,
        embed_dim=16,
        depths=[1, 1],
        num_heads=[2, 2],
        window_size=4,
    ),
    _vision(
        "resnet", "ResNetModel", "ResNetConfig", embedding_size=16, layer_type="basic", **_STAGES
    ),
    _vision("regnet", "RegNetModel", "RegNetConfig", embedding_size=16, groups_width=8, **_STAGES),
    _vision(
        "mobilevit",
        "MobileViTModel",
        "MobileViTConfig",
        size=64,
        image_size=64,
        hidden_sizes=[16, 16, 16],
        neck_hidden_sizes=[8, 8, 16, 16, 16, 16, 32],
        num_attention_heads=2,
        initializer_range=_WIDE_INIT,
    ),
    _vision(
        "segformer",
        "SegformerModel",
        "SegformerConfig",
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=32,
    ),
    _vision(
        "levit",
        "LevitModel",
        "LevitConfig",
        size=64,
        image_size=64,
        hidden_sizes=[32, 48, 64],
        num_attention_heads=[2, 3, 4],
        depths=[1, 1, 1],
        key_dim=[8, 8, 8],
        initializer_range=_WIDE_INIT,
    ),
    # audio
    _audio("wav2vec2", "Wav2Vec2Model", "Wav2Vec2Config", **_SPEECH),
    _audio("hubert", "HubertModel", "HubertConfig", **_SPEECH),
    _audio("wavlm", "WavLMModel", "WavLMConfig", **_SPEECH),
    _audio("data2vec-audio", "Data2VecAudioModel", "Data2VecAudioConfig", **_SPEECH),
    _audio(
        "whisper",
        "WhisperForConditionalGeneration",
        "WhisperConfig",
        "mel",
        num_mel_bins=16,
        max_source_positions=32,
        max_target_positions=32,
        **{**_ENCDEC, "max_position_embeddings": 32},
    ),
    _audio(
        "speech_to_text",
        "Speech2TextForConditionalGeneration",
        "Speech2TextConfig",
        "filterbank",
        input_feat_per_channel=16,
        num_conv_layers=2,
        conv_channels=32,
        conv_kernel_sizes=(5, 5),
        max_source_positions=64,
        max_target_positions=64,
        **_ENCDEC,
    ),
)


def arch(name: str) -> Arch:
    for a in ARCHS:
        if a.name == name:
            return a
    raise ValueError(f"no architecture {name!r}; choose from {[a.name for a in ARCHS]}")


def _import_transformers() -> Any:
    from halfprec.io.zoo import import_transformers

    return import_transformers()


def build(a: Arch, *, stress: bool = False, seed: int = 0) -> nn.Module:
    """Architecture ``a`` with seeded random weights, in eval mode (its stressed twin when
    ``stress``)."""
    tf = _import_transformers()
    torch.manual_seed(seed)
    model = a.build(tf).eval()
    with torch.no_grad():  # BatchNorms start at identity (MobileViT's init draws ~N(0, 0.02))
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine:
                m.weight.fill_(1.0)
                m.bias.zero_()
    return stressed(model, seed=seed) if stress else model


def example_batch(a: Arch, seed: int = 0) -> dict[str, torch.Tensor]:
    """One small batch for ``a``: token ids with a padded row, images, or audio."""
    g = torch.Generator().manual_seed(seed)
    if a.inputs in ("text", "seq2seq"):
        ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)
        mask = torch.ones_like(ids)
        mask[1, SEQ - 4 :] = 0  # a padded row: masking fills run
        batch = {"input_ids": ids, "attention_mask": mask}
        if a.inputs == "seq2seq":
            batch["decoder_input_ids"] = torch.randint(3, VOCAB, (BATCH, SEQ // 2), generator=g)
        return batch
    if a.inputs == "image":
        return {"pixel_values": torch.randn(BATCH, 3, a.size, a.size, generator=g)}
    if a.inputs == "waveform":
        return {"input_values": torch.randn(BATCH, 100 * a.size, generator=g)}
    decoder = torch.randint(3, VOCAB, (BATCH, SEQ // 2), generator=g)
    if a.inputs == "mel":  # whisper: (batch, mel bins, 2 * max_source_positions)
        feats = torch.randn(BATCH, a.size, 64, generator=g)
        return {"input_features": feats, "decoder_input_ids": decoder}
    if a.inputs == "filterbank":  # speech_to_text: (batch, frames, features)
        feats = torch.randn(BATCH, 64, a.size, generator=g)
        return {"input_features": feats, "decoder_input_ids": decoder}
    raise ValueError(f"unknown inputs kind {a.inputs!r} of {a.name}")


def _is_norm(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def _is_projection(module: nn.Module) -> bool:
    # transformers' Conv1D (GPT-2) is a Linear with its weight transposed
    return (
        isinstance(module, nn.Linear | nn.modules.conv._ConvNd) or type(module).__name__ == "Conv1D"
    )


def stressed(model: nn.Module, *, seed: int = 0) -> nn.Module:
    """A copy of ``model`` with realistic fp16 overflow: norm weights ~N(1, 0.5), every
    bias ~N(0, 0.2), every Linear/Conv weight x8. ``model`` is not changed."""
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in twin.modules():
            weight = getattr(module, "weight", None)
            if isinstance(weight, nn.Parameter) and _is_norm(module):
                weight.copy_(1.0 + NORM_STD * torch.randn(weight.shape, generator=g))
            elif isinstance(weight, nn.Parameter) and _is_projection(module):
                weight.mul_(WEIGHT_SCALE)
        for name, p in twin.named_parameters():
            if name.rpartition(".")[2] == "bias":
                p.copy_(BIAS_STD * torch.randn(p.shape, generator=g))
    return twin
