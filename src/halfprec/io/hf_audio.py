"""Audio example inputs for Hugging Face models (:mod:`halfprec.io.hf_inputs`): synthetic
waveforms through the directory's feature extractor, alone or with sentences through a
text-and-audio processor (CLAP's), and a speech decoder's prompt (Whisper's)."""

from __future__ import annotations

import math
from typing import Any

import torch

from halfprec.io.hf_context import (
    HfContext,
    joint_processor,
    load_tokenizer,
    pad_with_eos,
    saved_processor,
)
from halfprec.io.zoo import sentences


def text_and_audio(ctx: HfContext) -> dict[str, torch.Tensor]:
    """Sentences and waveforms of one batch size in one call of the directory's own
    text-and-audio processor (CLAP's: tokenizer and feature extractor with its own
    window); without one, each modality's own builder."""
    processor = joint_processor(ctx, "feature_extractor")
    if processor is None:
        return {}
    pad_with_eos(ctx, processor.tokenizer)
    rate = int(getattr(processor.feature_extractor, "sampling_rate", 16000))
    texts = sentences()[: ctx.rows]
    waves = _waveform(rate)[: ctx.rows]
    out = processor(text=texts, audio=waves, sampling_rate=rate, return_tensors="pt", padding=True)
    taken = ctx.taken(out)
    ctx.built.append(
        f"{', '.join(taken)} from {ctx.rows} built-in sentences and {ctx.rows} synthetic 1 s "
        f"waveforms at {rate} Hz through the {type(processor).__name__} in {ctx.path}"
    )
    return taken


def _waveform(rate: int, seconds: float = 1.0) -> list[Any]:
    """Two rows of tones (220 and 330 Hz with a harmonic) and a little seeded noise: no
    real recording ships with halfprec."""
    t = torch.arange(int(rate * seconds)) / rate
    gen = torch.Generator().manual_seed(0)
    rows = []
    for base in (220.0, 330.0):
        wave = 0.5 * torch.sin(2 * math.pi * base * t) + 0.2 * torch.sin(4 * math.pi * base * t)
        rows.append((wave + 0.01 * torch.randn(t.shape, generator=gen)).numpy())
    return rows


def _extracted(ctx: HfContext, name: str) -> dict[str, torch.Tensor] | None:
    """The directory's feature extractor on the waveform, with its own defaults (padding
    and length: Whisper's pads every clip to its fixed window), if it has one."""
    if not saved_processor(ctx, "feature_extractor"):
        return None
    extractor = ctx.tf.AutoFeatureExtractor.from_pretrained(str(ctx.path))
    rate = int(getattr(extractor, "sampling_rate", 16000))
    out = ctx.taken(extractor(_waveform(rate), sampling_rate=rate, return_tensors="pt"))
    ctx.notes.append(f"{name}: a synthetic 1 s waveform at {rate} Hz through the feature extractor")
    shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in out.items())
    ctx.built.append(
        f"{shapes} from two synthetic 1 s waveforms at {rate} Hz through the "
        f"{type(extractor).__name__} in {ctx.path}"
    )
    return out


def values(ctx: HfContext) -> dict[str, torch.Tensor]:
    """``input_values`` (Wav2Vec2, HuBERT): raw samples, normalised per row."""
    done = _extracted(ctx, "input_values")
    if done is not None:
        return done
    rate = int(getattr(ctx.config, "sampling_rate", 16000) or 16000)
    wave = torch.stack([torch.from_numpy(row) for row in _waveform(rate)])
    wave = (wave - wave.mean(-1, keepdim=True)) / wave.std(-1, keepdim=True)
    ctx.notes.append(f"input_values: a synthetic 1 s waveform at {rate} Hz, normalised")
    ctx.built.append(f"input_values: two synthetic 1 s waveforms at {rate} Hz, normalised")
    return {"input_values": wave}


def features(ctx: HfContext) -> dict[str, torch.Tensor]:
    """``input_features`` (Whisper): the feature extractor's log-mels, else random frames of
    the config's size (``num_mel_bins`` by twice ``max_source_positions``)."""
    done = _extracted(ctx, "input_features")
    if done is not None:
        return done
    mels = int(getattr(ctx.config, "num_mel_bins", 80))
    frames = 2 * int(getattr(ctx.config, "max_source_positions", 1500))
    gen = torch.Generator().manual_seed(0)
    ctx.built.append(
        f"input_features: random {mels}x{frames} frames (num_mel_bins by twice "
        "max_source_positions; no feature extractor in the directory)"
    )
    return {"input_features": torch.randn(ctx.rows, mels, frames, generator=gen)}


def speech_prompt(ctx: HfContext, limit: int | None) -> torch.Tensor:
    """A Whisper-style decoder input: the prompt ``generate`` starts with (start of
    transcript, then for a multilingual model the language and task, then no timestamps),
    as the tokenizer lays it out, before the built-in sentences. The tokenizer's own
    language and task are kept; a multilingual model without them transcribes English (the
    sentences' language), as a model card's ``get_decoder_prompt_ids(language="english",
    task="transcribe")`` asks."""
    tokenizer = load_tokenizer(ctx)
    # transformers 5 loads no model-specific fields into generation_config: read the file
    multilingual = bool(ctx.saved("generation_config.json").get("is_multilingual", False))
    language = tokenizer.language or ("english" if multilingual else None)
    task = tokenizer.task or ("transcribe" if multilingual else None)
    tokenizer.set_prefix_tokens(language=language, task=task, predict_timestamps=False)
    cut = {"truncation": True, "max_length": min(16, limit)} if limit else {}
    ids = torch.as_tensor(tokenizer(sentences()[: ctx.rows], padding=True, **cut)["input_ids"])
    prompt = "".join(tokenizer.convert_ids_to_tokens(tokenizer.prefix_tokens))
    ctx.built.append(
        f"decoder_input_ids: the decoder prompt {prompt} generate starts with, then "
        f"{ctx.rows} built-in sentences, through the {type(tokenizer).__name__} in {ctx.path}"
    )
    return ids
