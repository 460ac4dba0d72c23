"""Example batches for a Hugging Face model directory, built as its model card builds them.

The inputs come from the model and its directory, not from an assumption that every model
reads tokens:

- the names: the model's ``main_input_name`` and every parameter its ``forward`` requires;
  a text-and-vision model (a config with ``text_config`` and ``vision_config``, as CLIP's)
  gets both ``input_ids`` and ``pixel_values``; an encoder-decoder gets
  ``decoder_input_ids`` too;
- the values: the directory's own processor where it has one, called as a model card calls
  it, with the processor's own defaults (a Whisper feature extractor pads to its fixed
  window; an image processor resizes to its own size) and every output its
  ``model_input_names`` lists that ``forward`` takes: ``AutoTokenizer`` on halfprec's
  built-in sentences, ``AutoImageProcessor`` on scikit-learn's two bundled photographs,
  ``AutoFeatureExtractor`` on a waveform, and a text-and-image processor (``AutoProcessor``)
  on both at once, with its chat template or image token for a vision-language model;
  the decoder start of an encoder-decoder from its tokenizer's text shifted right by the
  model's own ``prepare_decoder_input_ids_from_labels``;
- the sizes, where no processor says: from the config (``image_size``, ``num_channels``,
  ``num_mel_bins``, ``context_length``, ``lags_sequence``, ``num_time_features``,
  ``num_input_channels``, ``vocab_size``, position limits); synthetic data only where no
  real sample can ship (a waveform of tones, seasonal series with their time features and
  an all-ones observed mask, random token ids without a tokenizer).

One call builds one batch size across every modality: 16 sentences for a text-only model,
else two rows of each (the two photographs, two waveforms, two series, two sentences).
:func:`example_batches` says what it built from what (``built``), so that an error on
these inputs is halfprec's to explain, not the user's. When some required input has no
builder, :class:`NoExampleInputs` names the inputs the model needs, the missing config field
where that is what stops it, and the ``--inputs`` file format that supplies them.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch
from halfprec.errors import InputsError, require
from halfprec.io.hf_audio import features, speech_prompt, text_and_audio, values
from halfprec.io.hf_context import (
    HfContext,
    joint_processor,
    load_tokenizer,
    pad_with_eos,
    saved_processor,
)
from halfprec.io.hf_series import forecast_inputs, takes_time_features
from halfprec.io.inputs import INPUTS_FORMAT
from halfprec.io.zoo import sentences, token_batch

_TEXT_ROWS = 16  # sentences for a text-only model (else ROWS of each input)
_NON_TEXT = ("pixel_values", "input_values", "input_features", "past_values")
_AUDIO = ("input_features", "input_values")


class NoExampleInputs(InputsError):
    """The model takes an input halfprec cannot build from its config. ``problem`` says
    which, without the fix (the message adds ``--inputs FILE`` and its format)."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"{problem}: pass --inputs FILE, {INPUTS_FORMAT}")
        self.problem = problem


def _forward_params(model: nn.Module) -> dict[str, inspect.Parameter]:
    params = inspect.signature(model.forward).parameters
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n: p for n, p in params.items() if p.kind in kinds}


def _wanted(ctx: HfContext) -> list[str]:
    """The inputs to build, main input first."""
    main = str(getattr(ctx.model, "main_input_name", "input_ids"))
    required = [n for n, p in ctx.params.items() if p.default is inspect.Parameter.empty]
    names = [main, *required]
    config = ctx.config
    if hasattr(config, "text_config") and hasattr(config, "vision_config"):
        names += [n for n in ("input_ids", "pixel_values") if n in ctx.params]
    if hasattr(config, "text_config") and hasattr(config, "audio_config"):
        names += [n for n in ("input_ids", *_AUDIO) if n in ctx.params]
    return list(dict.fromkeys(names))


def example_batches(
    model: nn.Module, path: Path, notes: list[str], built: list[str] | None = None
) -> list[Batch]:
    """One example batch for the Hugging Face ``model`` loaded from ``path`` (module docs);
    ``notes`` gets one sentence per choice made for the user, ``built`` one phrase per input
    saying what it was built from. Raises :class:`NoExampleInputs` naming what the model
    needs when some input has no builder."""
    from halfprec.io.zoo import import_transformers

    ctx = HfContext(model, path, import_transformers(), _forward_params(model), notes)
    names = _wanted(ctx)
    if ctx.has_tokenizer() and not any(n in names for n in _NON_TEXT):
        ctx.rows = _TEXT_ROWS  # a text-only model: 16 sentences (2 rows of random ids)
    missing = [n for n in names if n not in _BUILDERS]
    if missing:
        raise NoExampleInputs(
            f"{type(model).__name__} in {path} takes {', '.join(names)}; halfprec cannot build "
            f"{', '.join(missing)} from its config"
        )
    batch: dict[str, torch.Tensor] = {}
    if "input_ids" in names and "pixel_values" in names:
        batch.update(_text_and_images(ctx))
    if "input_ids" in names and any(n in names for n in _AUDIO):
        batch.update(text_and_audio(ctx))
    for name in names:
        if name not in batch:
            batch.update(_BUILDERS[name](ctx))
    decodes = getattr(ctx.config, "is_encoder_decoder", False) or _is_vision_encoder_decoder(ctx)
    if decodes and "decoder_input_ids" in ctx.params and "decoder_input_ids" not in batch:
        batch["decoder_input_ids"] = _decoder_tokens(ctx)
    if built is not None:
        built += ctx.built
    return [{k: v for k, v in batch.items() if k in ctx.params}]


def _is_vision_encoder_decoder(ctx: HfContext) -> bool:
    """A composite encoder-decoder (VisionEncoderDecoder, SpeechEncoderDecoder): a config
    with ``encoder`` and ``decoder`` configs."""
    return hasattr(ctx.config, "encoder") and hasattr(ctx.config, "decoder")


# -- text ------------------------------------------------------------------------------------


def _text(ctx: HfContext) -> dict[str, torch.Tensor]:
    """The built-in sentences through the directory's tokenizer (every output its
    ``model_input_names`` lists that ``forward`` takes), else random token ids."""
    config = ctx.sub("text_config")
    limit = max_positions(config)
    if ctx.has_tokenizer():
        tokenizer = load_tokenizer(ctx)
        cut = {"truncation": True, "max_length": limit} if limit else {}
        enc = tokenizer(sentences()[: ctx.rows], padding=True, return_tensors="pt", **cut)
        out = ctx.taken(enc, tuple(tokenizer.model_input_names))
        ctx.built.append(
            f"{', '.join(out)} from {ctx.rows} built-in sentences through the "
            f"{type(tokenizer).__name__} in {ctx.path}"
        )
        return out
    vocab = int(getattr(config, "vocab_size", None) or 1000)
    length = min(32, limit) if limit else 32
    ctx.built.append(f"input_ids: {ctx.rows}x{length} random token ids below vocab_size {vocab}")
    return token_batch(vocab, ctx.rows, length)


def max_positions(config: Any) -> int | None:
    """The longest sequence the model's config allows (positions), if it says."""
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _decoder_tokens(ctx: HfContext) -> torch.Tensor:
    """An encoder-decoder's decoder input: the sentences through its tokenizer as labels,
    shifted right by the model's own ``prepare_decoder_input_ids_from_labels`` (its decoder
    start token first); without a tokenizer, random tokens after the config's
    ``decoder_start_token_id``."""
    config = ctx.sub("decoder")
    limit = int(getattr(config, "max_target_positions", 0) or 0) or max_positions(config)
    shift = getattr(ctx.model, "prepare_decoder_input_ids_from_labels", None)
    if ctx.has_tokenizer() and hasattr(load_tokenizer(ctx), "set_prefix_tokens"):
        return speech_prompt(ctx, limit)
    if ctx.has_tokenizer() and callable(shift):
        tokenizer = load_tokenizer(ctx)
        cut = {"truncation": True, "max_length": min(16, limit)} if limit else {}
        labels = tokenizer(text_target=sentences()[: ctx.rows], padding=True, **cut)
        ids = torch.as_tensor(labels["input_ids"])
        ctx.built.append(
            f"decoder_input_ids: {ctx.rows} built-in sentences through the "
            f"{type(tokenizer).__name__} in {ctx.path}, shifted right by "
            f"{type(ctx.model).__name__}.prepare_decoder_input_ids_from_labels"
        )
        return torch.as_tensor(shift(labels=ids))
    start = int(getattr(ctx.config, "decoder_start_token_id", None) or 0)
    length = min(8, limit or 8)
    vocab = int(getattr(config, "vocab_size", None) or getattr(ctx.config, "vocab_size", 0) or 1000)
    tokens = token_batch(vocab, ctx.rows, length)["input_ids"]
    tokens[:, 0] = start
    ctx.built.append(
        f"decoder_input_ids: decoder_start_token_id {start} and {length - 1} random tokens"
    )
    return tokens


# -- vision ----------------------------------------------------------------------------------


def _photos() -> list[Any]:
    datasets: Any = require("sklearn.datasets", "demo", "example images for a vision model")
    return list(datasets.load_sample_images().images)  # two real photos, HWC uint8


def _size(value: Any, default: int = 224) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    return default, default


def _pixels(ctx: HfContext) -> dict[str, torch.Tensor]:
    """scikit-learn's two photos through the directory's image processor (its own size and
    normalisation), else resized to the config's ``image_size`` and scaled to [-1, 1]
    (ViT's own normalisation)."""
    photos = _photos()[: ctx.rows]
    if saved_processor(ctx, "image_processor"):
        processor = ctx.tf.AutoImageProcessor.from_pretrained(str(ctx.path))
        out = ctx.taken(processor(images=photos, return_tensors="pt"))
        ctx.built.append(
            f"{', '.join(out)} from scikit-learn's two sample photos through the "
            f"{type(processor).__name__} in {ctx.path}"
        )
        return out
    config = ctx.sub("vision_config")
    height, width = _size(getattr(config, "image_size", None))
    channels = int(getattr(config, "num_channels", 3) or 3)
    images = torch.stack([torch.from_numpy(p.copy()).permute(2, 0, 1).float() for p in photos])
    images = nn.functional.interpolate(images / 255, size=(height, width), mode="bilinear")
    if channels != 3:
        images = images.mean(dim=1, keepdim=True).expand(-1, channels, -1, -1)
    ctx.notes.append(
        f"{ctx.path} has no image processor; scikit-learn's two sample photos are resized to "
        f"{height}x{width} and scaled to [-1, 1]"
    )
    ctx.built.append(f"pixel_values: two photos resized to the config's {height}x{width}")
    return {"pixel_values": (images * 2 - 1).contiguous()}


def _image_token_id(config: Any) -> int | None:
    for name in ("image_token_id", "image_token_index"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def _text_and_images(ctx: HfContext) -> dict[str, torch.Tensor]:
    """Sentences and photos of one batch size through the directory's own processor: for
    a vision-language model (a config with an image token), each sentence in its chat
    template with one image, else after the processor's image token. Without a joint
    processor, a model with image tokens is refused; others take each modality's own."""
    image_token = _image_token_id(ctx.config)
    processor = joint_processor(ctx, "image_processor")
    if processor is None:
        if image_token is not None:
            raise NoExampleInputs(
                f"{type(ctx.model).__name__} in {ctx.path} places images at image token "
                f"{image_token} in its text, which only its processor lays out, and the "
                "directory has no text-and-image processor (processor_config.json or "
                "preprocessor_config.json with a tokenizer)"
            )
        return {}
    pad_with_eos(ctx, processor.tokenizer)
    texts = sentences()[: ctx.rows]
    photos: list[Any] = _photos()[: ctx.rows]
    how = "as plain text"
    if image_token is not None:
        texts, how = _with_image_tokens(processor, texts)
        photos = [[p] for p in photos]  # one image per prompt
    out = processor(images=photos, text=texts, return_tensors="pt", text_kwargs={"padding": True})
    taken = ctx.taken(out)
    ctx.built.append(
        f"{', '.join(taken)} from {ctx.rows} built-in sentences ({how}) and scikit-learn's "
        f"two sample photos through the {type(processor).__name__} in {ctx.path}"
    )
    return taken


def _with_image_tokens(processor: Any, texts: list[str]) -> tuple[list[str], str]:
    """Each text with one image: in the processor's chat template, else after its image
    token."""
    if getattr(processor, "chat_template", None):
        prompts = [
            processor.apply_chat_template(
                [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]}],
                add_generation_prompt=True,
                tokenize=False,
            )
            for t in texts
        ]
        return prompts, "in the processor's chat template, one image each"
    token = getattr(processor, "image_token", None) or "<image>"
    return [f"{token}{t}" for t in texts], f"after its image token {token!r}"


# -- time series -----------------------------------------------------------------------------


def _series(ctx: HfContext) -> dict[str, torch.Tensor]:
    """``past_values`` and what goes with it (:mod:`halfprec.io.hf_series`)."""
    try:
        out, built = forecast_inputs(ctx.config, set(ctx.params), ctx.rows)
    except ValueError as exc:
        raise NoExampleInputs(f"{type(ctx.model).__name__} in {ctx.path} {exc}") from None
    ctx.notes.append(built)
    ctx.built.append(built)
    return out


def _no_series(ctx: HfContext) -> dict[str, torch.Tensor]:
    """Time features and the observed mask come with ``past_values`` (built with it)."""
    if not takes_time_features(ctx.config):
        raise NoExampleInputs(
            f"{type(ctx.model).__name__} in {ctx.path} takes time features, but its config has "
            "no lags_sequence and num_time_features to size them"
        )
    return _series(ctx)


_BUILDERS = {
    "input_ids": _text,
    "pixel_values": _pixels,
    "input_values": values,
    "input_features": features,
    "past_values": _series,
    "past_time_features": _no_series,
    "past_observed_mask": _no_series,
}
