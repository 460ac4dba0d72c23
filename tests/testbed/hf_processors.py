"""Tiny Hugging Face models saved with the processor class a real checkpoint of their
architecture ships (issue 43): the processors are the real transformers classes, built from
their defaults and a small vocabulary of halfprec's built-in sentences.

``save(name, path)`` writes the model and its processor to ``path`` with
``save_pretrained``, as a user's checkpoint directory holds them. Shared by the tests and
``benchmarks/hf_matrix.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

__all__ = ["NAMES", "WINDOW", "save", "word_tokenizer", "bert_tokenizer"]

_SPECIALS = ["<pad>", "</s>", "<s>", "<unk>"]
_TINY = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
_TINY = {**_TINY, "intermediate_size": 64}
_TEXT = {**_TINY, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 128}


def _words() -> list[str]:
    from halfprec.io.zoo import sentences

    words = {w for s in sentences() for w in s.lower().replace(".", " ").split()}
    return sorted(words)[:100]


def word_tokenizer(extra: tuple[str, ...] = ()) -> Any:
    """A real fast tokenizer (word level) with pad, eos, bos and unk tokens and the special
    tokens ``extra`` (an image token), ids below 128."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate([*_SPECIALS, *extra, *_words()])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="</s>",
        bos_token="<s>",
        unk_token="<unk>",
        additional_special_tokens=list(extra),
    )


def bert_tokenizer(folder: Path) -> Any:
    """BERT's own fast tokenizer class on a small vocab.txt (BLIP's processor uses it)."""
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]

    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *_words()]) + "\n")
    return BertTokenizerFast(vocab_file=str(vocab))


def whisper_tokenizer(tf: Any) -> Any:
    """Whisper's own tokenizer class on a byte-level vocabulary (no merges) with Whisper's
    special tokens in their order: end of text 256, start of transcript 257, the languages
    from 258 (English), then translate, transcribe, ..., no timestamps (363)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    tasks = ["translate", "transcribe", "startoflm", "startofprev", "nocaptions", "notimestamps"]
    specials = [f"<|{t}|>" for t in ["startoftranscript", *LANGUAGES, *tasks]]
    vocab = {c: i for i, c in enumerate([*bytes_to_unicode().values(), "<|endoftext|>"])}
    tokenizer = tf.WhisperTokenizer(vocab=vocab, merges=[], pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    return tokenizer


def _whisper(tf: Any, path: Path) -> None:
    """Whisper (multilingual) with WhisperProcessor: its feature extractor's fixed 30 s
    window (3000 mel frames) and its tokenizer, whose special tokens lay out the decoder
    prompt; the generation config maps languages and tasks to them, as a checkpoint's does."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    tokenizer = whisper_tokenizer(tf)
    ids = tokenizer.convert_tokens_to_ids
    config = tf.WhisperConfig(
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=32,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        vocab_size=len(tokenizer),
        pad_token_id=ids("<|endoftext|>"),
        bos_token_id=ids("<|endoftext|>"),
        eos_token_id=ids("<|endoftext|>"),
        decoder_start_token_id=ids("<|startoftranscript|>"),
    )
    model = tf.WhisperForConditionalGeneration(config)
    generation = model.generation_config
    generation.is_multilingual = True
    languages = [f"<|{code}|>" for code in LANGUAGES]
    generation.lang_to_id = {t: ids(t) for t in languages}
    generation.task_to_id = {"translate": ids("<|translate|>"), "transcribe": ids("<|transcribe|>")}
    generation.no_timestamps_token_id = ids("<|notimestamps|>")
    model.save_pretrained(path)
    extractor = tf.WhisperFeatureExtractor(feature_size=80)
    tf.WhisperProcessor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(path)


# BlipVisionConfig's default initializer_range is 1e-10: a model built from it has
# embeddings near 1e-10 and outputs near 1e-6, which no trained checkpoint has
_BLIP_VISION = {**_TINY, "image_size": 32, "patch_size": 8, "initializer_range": 0.02}


def _blip(tf: Any, path: Path) -> None:
    """BLIP image captioning: BlipProcessor (BlipImageProcessor + BERT's tokenizer)."""
    text = {**_TINY, "vocab_size": 128, "max_position_embeddings": 64}
    text = {**text, "bos_token_id": 2, "sep_token_id": 3, "pad_token_id": 0}
    config = tf.BlipConfig(text_config=text, vision_config=_BLIP_VISION, projection_dim=16)
    tf.BlipForConditionalGeneration(config).save_pretrained(path)
    image = tf.BlipImageProcessor(size={"height": 32, "width": 32})
    tf.BlipProcessor(image_processor=image, tokenizer=bert_tokenizer(path)).save_pretrained(path)


_LLAVA_TEMPLATE = (
    "{% for message in messages %}{{ message['role'].upper() + ': ' }}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image> ' }}"
    "{% else %}{{ item['text'] + ' ' }}{% endif %}{% endfor %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT: ' }}{% endif %}"
)

# what LlavaProcessor and LlavaNextProcessor lay out: 8x8 patches, the CLS feature dropped
_LLAVA_LAYOUT = {
    "patch_size": 8,
    "vision_feature_select_strategy": "default",
    "num_additional_image_tokens": 1,
    "chat_template": _LLAVA_TEMPLATE,
}


def _llava(tf: Any, path: Path) -> None:
    """LLaVA: LlavaProcessor (CLIP's image processor, a tokenizer with ``<image>``, a chat
    template), 16 image tokens a photo (32x32 pixels in 8x8 patches)."""
    tokenizer = word_tokenizer(("<image>",))
    vision = {**_TINY, "image_size": 32, "patch_size": 8, "projection_dim": 16}
    config = tf.LlavaConfig(
        vision_config=tf.CLIPVisionConfig(**vision),
        text_config=tf.LlamaConfig(**_TEXT),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    tf.LlavaForConditionalGeneration(config).save_pretrained(path)
    image = tf.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=32)
    tf.LlavaProcessor(image_processor=image, tokenizer=tokenizer, **_LLAVA_LAYOUT).save_pretrained(
        path
    )


def _paligemma(tf: Any, path: Path) -> None:
    """PaliGemma: PaliGemmaProcessor (SigLIP's image processor, a tokenizer with
    ``<image>``), 16 image tokens a photo put before the text by the processor."""
    tokenizer = word_tokenizer(("<image>",))
    vision = {**_TINY, "image_size": 32, "patch_size": 8, "projection_dim": 32}
    config = tf.PaliGemmaConfig(
        vision_config=tf.SiglipVisionConfig(**vision),
        text_config=tf.GemmaConfig(**_TEXT, head_dim=16),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        projection_dim=32,
    )
    config.text_config.num_image_tokens = 16
    tf.PaliGemmaForConditionalGeneration(config).save_pretrained(path)
    image = tf.SiglipImageProcessor(size={"height": 32, "width": 32}, image_seq_length=16)
    tf.PaliGemmaProcessor(image_processor=image, tokenizer=tokenizer).save_pretrained(path)


def _llava_next(tf: Any, path: Path) -> None:
    """LLaVA-NeXT: LlavaNextProcessor (any-resolution tiles, ``image_sizes``), chat template."""
    tokenizer = word_tokenizer(("<image>",))
    vision = {**_TINY, "image_size": 32, "patch_size": 8, "projection_dim": 16}
    config = tf.LlavaNextConfig(
        vision_config=tf.CLIPVisionConfig(**vision),
        text_config=tf.LlamaConfig(**{**_TEXT, "max_position_embeddings": 512}),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        image_grid_pinpoints=[[32, 32], [32, 64]],
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    tf.LlavaNextForConditionalGeneration(config).save_pretrained(path)
    image = tf.LlavaNextImageProcessor(
        size={"shortest_edge": 32}, crop_size=32, image_grid_pinpoints=[[32, 32], [32, 64]]
    )
    processor = tf.LlavaNextProcessor(image_processor=image, tokenizer=tokenizer, **_LLAVA_LAYOUT)
    processor.save_pretrained(path)


def _clap(tf: Any, path: Path) -> None:
    """CLAP (contrastive audio-text): ClapProcessor, ClapFeatureExtractor (its fixed 10 s
    window of 64 mel bins, 48 kHz) and RoBERTa's tokenizer on a byte-level vocabulary."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    vocab = {c: i for i, c in enumerate([*specials, *bytes_to_unicode().values()])}
    tokenizer = tf.RobertaTokenizer(vocab=vocab, merges=[])
    text = {**_TINY, "vocab_size": len(tokenizer), "max_position_embeddings": 128}
    audio = {
        "hidden_size": 32,
        "num_mel_bins": 64,
        "spec_size": 256,
        "patch_size": 4,
        "patch_stride": [4, 4],
        "window_size": 8,
        "depths": [1, 1],
        "num_attention_heads": [2, 2],
        "patch_embeds_hidden_size": 16,
        "projection_hidden_size": 32,
        "enable_fusion": False,
    }
    config = tf.ClapConfig(text_config=text, audio_config=audio, projection_dim=16)
    tf.ClapModel(config).save_pretrained(path)
    extractor = tf.ClapFeatureExtractor(feature_size=64, truncation="rand_trunc")
    tf.ClapProcessor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(path)


def _forecaster(cls: str, config_cls: str) -> Callable[[Any, Path], None]:
    def save(tf: Any, path: Path) -> None:
        config = getattr(tf, config_cls)(
            prediction_length=4,
            context_length=16,
            lags_sequence=[1, 2, 3],
            num_time_features=2,
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=16,
            decoder_ffn_dim=16,
        )
        getattr(tf, cls)(config).save_pretrained(path)

    save.__doc__ = f"{cls}: no processor; its inputs follow from the config."
    return save


def _ast(tf: Any, path: Path) -> None:
    """Audio Spectrogram Transformer: ASTFeatureExtractor pads to its fixed 64 frames."""
    config = tf.ASTConfig(**_TINY, num_mel_bins=16, max_length=64, patch_size=8, num_labels=3)
    config.frequency_stride, config.time_stride = 8, 8
    tf.ASTForAudioClassification(config).save_pretrained(path)
    tf.ASTFeatureExtractor(num_mel_bins=16, max_length=64).save_pretrained(path)


def _wav2vec2_cls(tf: Any, path: Path) -> None:
    """Wav2Vec2 audio classification (a weight-normalised positional conv)."""
    config = tf.Wav2Vec2Config(
        **_TINY,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        num_labels=3,
        classifier_proj_size=16,
    )
    tf.Wav2Vec2ForSequenceClassification(config).save_pretrained(path)
    tf.Wav2Vec2FeatureExtractor(return_attention_mask=True).save_pretrained(path)


def _convnext(tf: Any, path: Path) -> None:
    config = tf.ConvNextConfig(
        hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, image_size=32, num_labels=3
    )
    tf.ConvNextForImageClassification(config).save_pretrained(path)
    tf.ConvNextImageProcessor(size={"shortest_edge": 32}, crop_pct=1.0).save_pretrained(path)


def _detr(tf: Any, path: Path) -> None:
    """DETR object detection on a ResNet backbone built from its config (no timm)."""
    backbone = tf.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], out_features=["stage2"]
    )
    config = tf.DetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=backbone,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_queries=8,
        num_labels=3,
    )
    tf.DetrForObjectDetection(config).save_pretrained(path)
    size = {"shortest_edge": 32, "longest_edge": 64}
    tf.DetrImageProcessor(size=size).save_pretrained(path)


def _segformer(tf: Any, path: Path) -> None:
    config = tf.SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        num_attention_heads=[1, 2],
        patch_sizes=[7, 3],
        strides=[4, 2],
        decoder_hidden_size=32,
        num_labels=3,
    )
    tf.SegformerForSemanticSegmentation(config).save_pretrained(path)
    tf.SegformerImageProcessor(size={"height": 32, "width": 32}).save_pretrained(path)


def _blip_itm(tf: Any, path: Path) -> None:
    """BLIP image-text retrieval (matching head): BlipProcessor."""
    text = {**_TINY, "vocab_size": 128, "max_position_embeddings": 64, "pad_token_id": 0}
    config = tf.BlipConfig(text_config=text, vision_config=_BLIP_VISION, projection_dim=16)
    tf.BlipForImageTextRetrieval(config).save_pretrained(path)
    image = tf.BlipImageProcessor(size={"height": 32, "width": 32})
    tf.BlipProcessor(image_processor=image, tokenizer=bert_tokenizer(path)).save_pretrained(path)


def _decoder(cls: str, config_cls: str, **extra: Any) -> Callable[[Any, Path], None]:
    """A causal LM saved with a fast tokenizer (a decoder's processor)."""

    def save(tf: Any, path: Path) -> None:
        config = getattr(tf, config_cls)(**{**_TEXT, "num_hidden_layers": 2, **extra})
        getattr(tf, cls)(config).save_pretrained(path)
        word_tokenizer().save_pretrained(path)

    save.__doc__ = f"{cls} with a fast tokenizer."
    return save


WINDOW = 8  # shorter than the example sentences' padded length
_LOCAL = {"sliding_window": WINDOW, "head_dim": 16}


_SAVERS: dict[str, Callable[[Any, Path], None]] = {
    "whisper-30s": _whisper,
    "blip-captioning": _blip,
    "llava": _llava,
    "paligemma": _paligemma,
    "llava-next": _llava_next,
    "clap": _clap,
    "time-series-transformer": _forecaster(
        "TimeSeriesTransformerForPrediction", "TimeSeriesTransformerConfig"
    ),
    "informer": _forecaster("InformerForPrediction", "InformerConfig"),
    "autoformer": _forecaster("AutoformerForPrediction", "AutoformerConfig"),
    "ast": _ast,
    "wav2vec2-audio-cls": _wav2vec2_cls,
    "convnext": _convnext,
    "detr": _detr,
    "segformer": _segformer,
    "blip-itm": _blip_itm,
    "gemma3-local": _decoder("Gemma3ForCausalLM", "Gemma3TextConfig", **_LOCAL),
    "cohere2-local": _decoder(
        "Cohere2ForCausalLM",
        "Cohere2Config",
        **_LOCAL,
        layer_types=["sliding_attention", "full_attention"],
    ),
    "qwen2-local": _decoder(
        "Qwen2ForCausalLM", "Qwen2Config", **_LOCAL, use_sliding_window=True, max_window_layers=1
    ),
    "bamba": _decoder(
        "BambaForCausalLM",
        "BambaConfig",
        attn_layer_indices=[1],
        mamba_n_heads=4,
        mamba_d_head=16,
        mamba_n_groups=1,
        mamba_d_state=8,
        mamba_chunk_size=16,
        mamba_expand=2,
    ),
}
NAMES = tuple(_SAVERS)


def save(name: str, path: Path) -> Path:
    """Model ``name`` (seeded weights) and its processor saved to ``path``."""
    import transformers as tf

    torch.manual_seed(0)
    _SAVERS[name](tf, path)
    return path
