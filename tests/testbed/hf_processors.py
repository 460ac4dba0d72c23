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

__all__ = ["NAMES", "save", "word_tokenizer", "bert_tokenizer"]

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


def _whisper(tf: Any, path: Path) -> None:
    """Whisper with its feature extractor's fixed 30 s window (3000 mel frames)."""
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
        vocab_size=128,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
        decoder_start_token_id=2,
    )
    tf.WhisperForConditionalGeneration(config).save_pretrained(path)
    tf.WhisperFeatureExtractor(feature_size=80).save_pretrained(path)


def _blip(tf: Any, path: Path) -> None:
    """BLIP image captioning: BlipProcessor (BlipImageProcessor + BERT's tokenizer)."""
    text = {**_TINY, "vocab_size": 128, "max_position_embeddings": 64}
    text = {**text, "bos_token_id": 2, "sep_token_id": 3, "pad_token_id": 0}
    vision = {**_TINY, "image_size": 32, "patch_size": 8}
    config = tf.BlipConfig(text_config=text, vision_config=vision, projection_dim=16)
    tf.BlipForConditionalGeneration(config).save_pretrained(path)
    image = tf.BlipImageProcessor(size={"height": 32, "width": 32})
    tf.BlipProcessor(image_processor=image, tokenizer=bert_tokenizer(path)).save_pretrained(path)


_LLAVA_TEMPLATE = (
    "{% for message in messages %}{{ message['role'].upper() + ': ' }}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image> ' }}"
    "{% else %}{{ item['text'] + ' ' }}{% endif %}{% endfor %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT: ' }}{% endif %}"
)


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
    tf.LlavaProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=_LLAVA_TEMPLATE,
    ).save_pretrained(path)


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


_SAVERS: dict[str, Callable[[Any, Path], None]] = {
    "whisper-30s": _whisper,
    "blip-captioning": _blip,
    "llava": _llava,
    "time-series-transformer": _forecaster(
        "TimeSeriesTransformerForPrediction", "TimeSeriesTransformerConfig"
    ),
    "informer": _forecaster("InformerForPrediction", "InformerConfig"),
    "autoformer": _forecaster("AutoformerForPrediction", "AutoformerConfig"),
}
NAMES = tuple(_SAVERS)


def save(name: str, path: Path) -> Path:
    """Model ``name`` (seeded weights) and its processor saved to ``path``."""
    import transformers as tf

    torch.manual_seed(0)
    _SAVERS[name](tf, path)
    return path
