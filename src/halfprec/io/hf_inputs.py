"""Example batches for a Hugging Face model directory, built from the model itself.

The inputs come from the model, not from an assumption that every model reads tokens, as
Optimum's dummy input generators (``optimum/utils/input_generators.py``, one per modality,
sized from the config) build them:

- the names: the model's ``main_input_name`` and every parameter its ``forward`` requires;
  a text-and-vision model (a config with ``text_config`` and ``vision_config``, as CLIP's)
  gets both ``input_ids`` and ``pixel_values``; an encoder-decoder gets
  ``decoder_input_ids`` too;
- the sizes: from the config (``image_size``, ``num_channels``, ``num_mel_bins``,
  ``context_length``, ``num_input_channels``, ``vocab_size``, position limits);
- the values: the directory's own processor on real example data where the directory has
  one (``AutoTokenizer`` on halfprec's built-in sentences, ``AutoImageProcessor`` on
  scikit-learn's two bundled photographs, ``AutoFeatureExtractor`` on a waveform); the
  photographs resized and scaled to [-1, 1] for a vision model without a processor;
  synthetic data only where no real sample can ship (a waveform of tones, a multichannel
  series of seasonal curves, random token ids without a tokenizer).

When some required input has no builder, :class:`NoExampleInputs` names the inputs the
model needs and the ``--inputs`` file format that supplies them.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch
from halfprec.errors import InputsError, ModelSpecError, require
from halfprec.io.zoo import sentences, token_batch
from halfprec.modules import first_line

__all__ = ["NoExampleInputs", "example_batches", "max_positions", "INPUTS_FORMAT"]

INPUTS_FORMAT = (
    "a .safetensors file with one tensor per input name (batch0.NAME, batch1.NAME for "
    "several batches) or a .pt file of a dict of tensors"
)
_ROWS = 2  # rows of the non-text inputs: both photos, two waveforms, two series
_PROCESSOR_FILE = "preprocessor_config.json"
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model")


class NoExampleInputs(InputsError):
    """The model takes an input halfprec cannot build from its config. ``problem`` says
    which, without the fix (the message adds ``--inputs FILE`` and its format)."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"{problem}: pass --inputs FILE, {INPUTS_FORMAT}")
        self.problem = problem


@dataclass
class _Context:
    """What every builder reads: the model, its directory and config, and notes to add."""

    model: nn.Module
    path: Path
    tf: Any
    params: dict[str, inspect.Parameter]
    notes: list[str] = field(default_factory=list)

    @property
    def config(self) -> Any:
        return self.model.config

    def sub(self, name: str) -> Any:
        """The ``vision_config``/``text_config`` of a composite model, else the config."""
        return getattr(self.config, name, None) or self.config


def _forward_params(model: nn.Module) -> dict[str, inspect.Parameter]:
    params = inspect.signature(model.forward).parameters
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n: p for n, p in params.items() if p.kind in kinds}


def _wanted(ctx: _Context) -> list[str]:
    """The inputs to build, main input first."""
    main = str(getattr(ctx.model, "main_input_name", "input_ids"))
    required = [n for n, p in ctx.params.items() if p.default is inspect.Parameter.empty]
    names = [main, *required]
    config = ctx.config
    multimodal = hasattr(config, "text_config") and hasattr(config, "vision_config")
    if multimodal:
        names += [n for n in ("input_ids", "pixel_values") if n in ctx.params]
    return list(dict.fromkeys(names))


def example_batches(model: nn.Module, path: Path, notes: list[str]) -> list[Batch]:
    """One example batch for the Hugging Face ``model`` loaded from ``path`` (module docs);
    ``notes`` gets one sentence per choice made for the user. Raises
    :class:`NoExampleInputs` naming what the model needs when some input has no builder."""
    from halfprec.io.zoo import import_transformers

    ctx = _Context(model, path, import_transformers(), _forward_params(model), notes)
    names = _wanted(ctx)
    missing = [n for n in names if n not in _BUILDERS]
    if missing:
        raise NoExampleInputs(
            f"{type(model).__name__} in {path} takes {', '.join(names)}; halfprec cannot build "
            f"{', '.join(missing)} from its config"
        )
    batch: dict[str, torch.Tensor] = {}
    for name in names:
        if name not in batch:
            batch.update(_BUILDERS[name](ctx))
    if getattr(ctx.config, "is_encoder_decoder", False) and "decoder_input_ids" in ctx.params:
        batch["decoder_input_ids"] = _decoder_tokens(ctx.config, next(iter(batch.values())))
    return [{k: v for k, v in batch.items() if k in ctx.params}]


# -- text ------------------------------------------------------------------------------------


def _text(ctx: _Context) -> dict[str, torch.Tensor]:
    """The built-in sentences through the directory's tokenizer, else random token ids."""
    config = ctx.sub("text_config")
    limit = max_positions(config)
    if any((ctx.path / f).is_file() for f in _TOKENIZER_FILES):
        enc = _tokenize(ctx, limit)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    vocab = int(getattr(config, "vocab_size", None) or 1000)
    return token_batch(vocab, _ROWS, min(32, limit) if limit else 32)


def max_positions(config: Any) -> int | None:
    """The longest sequence the model's config allows (positions), if it says."""
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _tokenize(ctx: _Context, limit: int | None) -> Any:
    """The example sentences tokenized and padded (truncated to the model's positions); a
    tokenizer without a pad token pads with its eos token, as ``transformers.pipeline``
    does (and a note says so)."""
    try:
        tokenizer = ctx.tf.AutoTokenizer.from_pretrained(str(ctx.path), trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelSpecError(
            f"cannot load the tokenizer in {ctx.path} ({first_line(exc)}); check its tokenizer "
            "files against the installed transformers, or pass --inputs FILE"
        ) from None
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelSpecError(
                f"the tokenizer in {ctx.path} has neither a pad token nor an eos token to pad "
                "with; set pad_token in its tokenizer_config.json, or pass --inputs FILE"
            )
        tokenizer.pad_token = tokenizer.eos_token
        ctx.notes.append(
            f"the tokenizer in {ctx.path} has no pad token; padding with its eos token "
            f"{tokenizer.eos_token!r} (id {tokenizer.eos_token_id}), as transformers.pipeline does"
        )
    cut = {"truncation": True, "max_length": limit} if limit else {}
    return tokenizer(sentences()[:16], padding=True, return_tensors="pt", **cut)


def _decoder_tokens(config: Any, first: torch.Tensor) -> torch.Tensor:
    """A short start of decoder tokens for an encoder-decoder, from its start token."""
    start = int(getattr(config, "decoder_start_token_id", None) or 0)
    length = min(8, int(getattr(config, "max_target_positions", 8) or 8))
    vocab = int(getattr(config, "vocab_size", 1000))
    tokens = token_batch(vocab, first.shape[0], length)["input_ids"]
    tokens[:, 0] = start
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


def _pixels(ctx: _Context) -> dict[str, torch.Tensor]:
    """scikit-learn's two photos through the directory's image processor, else resized to
    the config's ``image_size`` and scaled to [-1, 1] (ViT's own normalisation)."""
    photos = _photos()
    if (ctx.path / _PROCESSOR_FILE).is_file():
        processor = ctx.tf.AutoImageProcessor.from_pretrained(str(ctx.path))
        return {"pixel_values": processor(images=photos, return_tensors="pt")["pixel_values"]}
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
    return {"pixel_values": (images * 2 - 1).contiguous()}


# -- audio -----------------------------------------------------------------------------------


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


def _extracted(ctx: _Context, name: str) -> dict[str, torch.Tensor] | None:
    """The directory's feature extractor on the waveform, if it has one."""
    if not (ctx.path / _PROCESSOR_FILE).is_file():
        return None
    extractor = ctx.tf.AutoFeatureExtractor.from_pretrained(str(ctx.path))
    rate = int(getattr(extractor, "sampling_rate", 16000))
    out = extractor(_waveform(rate), sampling_rate=rate, return_tensors="pt", padding=True)
    ctx.notes.append(f"{name}: a synthetic 1 s waveform at {rate} Hz through the feature extractor")
    return {k: v for k, v in out.items() if k in ctx.params}


def _values(ctx: _Context) -> dict[str, torch.Tensor]:
    """``input_values`` (Wav2Vec2, HuBERT): raw samples, normalised per row."""
    done = _extracted(ctx, "input_values")
    if done is not None:
        return done
    rate = int(getattr(ctx.config, "sampling_rate", 16000) or 16000)
    wave = torch.stack([torch.from_numpy(row) for row in _waveform(rate)])
    wave = (wave - wave.mean(-1, keepdim=True)) / wave.std(-1, keepdim=True)
    ctx.notes.append(f"input_values: a synthetic 1 s waveform at {rate} Hz, normalised")
    return {"input_values": wave}


def _features(ctx: _Context) -> dict[str, torch.Tensor]:
    """``input_features`` (Whisper): the feature extractor's log-mels, else random frames of
    the config's size (``num_mel_bins`` by twice ``max_source_positions``)."""
    done = _extracted(ctx, "input_features")
    if done is not None:
        return done
    mels = int(getattr(ctx.config, "num_mel_bins", 80))
    frames = 2 * int(getattr(ctx.config, "max_source_positions", 1500))
    gen = torch.Generator().manual_seed(0)
    return {"input_features": torch.randn(_ROWS, mels, frames, generator=gen)}


# -- time series -----------------------------------------------------------------------------


def _series(ctx: _Context) -> dict[str, torch.Tensor]:
    """``past_values`` (PatchTST, PatchTSMixer): ``context_length`` steps of
    ``num_input_channels`` seasonal curves (a daily and a weekly period, a trend, noise)."""
    config = ctx.config
    length = int(getattr(config, "context_length", 0) or 0)
    channels = int(getattr(config, "num_input_channels", 1) or 1)
    if length <= 0:
        raise NoExampleInputs(
            f"{type(ctx.model).__name__} in {ctx.path} takes past_values but its config has no "
            "context_length"
        )
    t = torch.arange(length, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    phase = torch.rand(_ROWS, 1, channels, generator=gen) * 2 * math.pi
    day = torch.sin(2 * math.pi * t[None, :, None] / 24 + phase)
    week = 0.5 * torch.sin(2 * math.pi * t[None, :, None] / 168 + phase)
    trend = 0.01 * t[None, :, None]
    noise = 0.1 * torch.randn(_ROWS, length, channels, generator=gen)
    ctx.notes.append(
        f"past_values: {length} steps of {channels} synthetic seasonal series (no real one ships)"
    )
    return {"past_values": day + week + trend + noise}


_BUILDERS = {
    "input_ids": _text,
    "pixel_values": _pixels,
    "input_values": _values,
    "input_features": _features,
    "past_values": _series,
}
