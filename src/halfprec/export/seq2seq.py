"""Encoder-decoder Hugging Face models (T5, BART, Whisper) exported with both KV caches as tensors.

An encoder-decoder is exported as two files, each a wrapper around the (unchanged) model:

- :class:`EncoderWithCross` runs the encoder once: inputs ``input_ids`` and
  ``attention_mask`` (Whisper: ``input_features``); outputs ``encoder_hidden_states`` and
  ``cross_key_values``, one ``{"key", "value"}`` dict per decoder layer (the
  cross-attention K/V, fixed for the whole decode). They come from one decoder step on
  ``decoder_start_token_id`` with an empty ``EncoderDecoderCache``, whose cross-attention
  half then holds every layer's K/V: no per-architecture code.
- :class:`DecoderWithPast` runs decoder steps: inputs ``decoder_input_ids`` (new tokens),
  ``encoder_hidden_states``, ``attention_mask`` (the encoder mask; none for Whisper),
  ``past_key_values`` (self-attention, ``past_len`` may be 0) and ``cross_key_values``;
  outputs ``logits`` and ``present_key_values`` (``past_len + new`` positions).

:class:`Seq2SeqReference` makes the example batches of both from the model's example
batches (which carry ``decoder_input_ids``): the encoder inputs, and their first half
(text encoders, so that the encoder length is a symbolic dimension); for the decoder a
split decoder prompt, a one-token step (on the shorter encoder input) and an empty past,
as :func:`~halfprec.export.kv_cache.with_past_batches` does for decoder-only models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch
from halfprec.export.capture import forward_params, named_inputs
from halfprec.export.config import ExportError
from halfprec.export.info import ArtifactInfo
from halfprec.export.kv_cache import (
    Past,
    as_past,
    cache_keyword,
    cache_reference,
    empty_past,
    require_tokens,
)
from halfprec.modules import evaluating

__all__ = [
    "EncoderWithCross",
    "DecoderWithPast",
    "Seq2SeqReference",
    "is_encoder_decoder",
    "encoder_path",
    "kv_reference",
    "SEQ2SEQ_NOTE",
]

SEQ2SEQ_NOTE = (
    "encoder-decoder in two files: {encoder} (encoder inputs -> encoder_hidden_states, "
    "cross_key_values.N.key/value) and this decoder step (decoder_input_ids, "
    "encoder_hidden_states, attention_mask, past_key_values, cross_key_values -> logits, "
    "present_key_values)"
)

ENCODER_INPUTS = ("input_ids", "attention_mask", "input_features")


def is_encoder_decoder(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    return bool(getattr(config, "is_encoder_decoder", False)) and type(model).__module__.startswith(
        "transformers."
    )


def encoder_path(path: Path) -> Path:
    """The encoder file beside the decoder file ``path``: ``t5.pt2`` -> ``t5.encoder.pt2``."""
    return path.with_name(f"{path.stem}.encoder{path.suffix}")


def _caches(model: nn.Module, past: Past, cross: Past) -> Any:
    from transformers import DynamicCache, EncoderDecoderCache

    def cache(layers: Past) -> Any:
        return DynamicCache(
            ddp_cache_data=[(p["key"], p["value"]) for p in layers],
            config=model.config,  # type: ignore[arg-type]
        )

    return EncoderDecoderCache(cache(past), cache(cross))


def _decoder_step(
    model: nn.Module,
    keyword: str,
    decoder_input_ids: torch.Tensor,
    encoder_hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    past: Past,
    cross: Past,
) -> tuple[torch.Tensor, Any]:
    from transformers.modeling_outputs import BaseModelOutput

    mask = {} if attention_mask is None else {"attention_mask": attention_mask}
    out = model(
        encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden_states),
        decoder_input_ids=decoder_input_ids,
        use_cache=True,
        **mask,
        **{keyword: _caches(model, past, cross)},
    )
    cache = out.get("cache", None)  # transformers 5; "past_key_values" before
    cache = cache if cache is not None else out.get("past_key_values", None)
    if cache is None or not hasattr(cache, "cross_attention_cache"):
        raise ExportError(
            f"{type(model).__name__} returned no EncoderDecoderCache; export it without --kv-cache"
        )
    return out["logits"], cache


def _checked(model: nn.Module) -> str:
    if not is_encoder_decoder(model):
        raise ExportError(
            f"{type(model).__name__} is not a Hugging Face encoder-decoder; export it with "
            "halfprec.export.kv_cache.WithPast or without --kv-cache"
        )
    if getattr(model, "main_input_name", "input_ids") not in ("input_ids", "input_features"):
        raise ExportError(
            f"{type(model).__name__} takes {model.main_input_name}, not input_ids or "
            "input_features; export it without --kv-cache"
        )
    return cache_keyword(model)


class _Wrapper(nn.Module):
    """An unchanged Hugging Face encoder-decoder and the name of its cache keyword."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.keyword = _checked(model)
        self.model = model


class EncoderWithCross(_Wrapper):
    """The encoder of ``model`` and every decoder layer's cross-attention K/V (module doc)."""

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if input_features is not None:
            inputs = {"input_features": input_features}
        encoder = self.model.get_encoder()  # type: ignore[operator]
        hidden = encoder(**{k: v for k, v in inputs.items() if v is not None})[0]
        start = int(getattr(self.model.config, "decoder_start_token_id", None) or 0)
        token = torch.full((hidden.shape[0], 1), start, dtype=torch.long, device=hidden.device)
        _, cache = _decoder_step(self.model, self.keyword, token, hidden, attention_mask, (), ())
        return {
            "encoder_hidden_states": hidden,
            "cross_key_values": as_past(cache.cross_attention_cache),
        }


class DecoderWithPast(_Wrapper):
    """One decoder step of ``model`` with both caches as tensors (module doc)."""

    def forward(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Past = (),
        cross_key_values: Past = (),
    ) -> dict[str, Any]:
        logits, cache = _decoder_step(
            self.model,
            self.keyword,
            decoder_input_ids,
            encoder_hidden_states,
            attention_mask,
            past_key_values,
            cross_key_values,
        )
        return {"logits": logits, "present_key_values": as_past(cache.self_attention_cache)}


class Seq2SeqReference:
    """The fp32 wrappers of both files and their example batches (made in eval mode)."""

    def __init__(self, model: nn.Module, batches: list[Batch]) -> None:
        self.encoder = EncoderWithCross(model)
        self.decoder = DecoderWithPast(model)
        self.encoder_batches: list[Batch] = []
        self.decoder_batches: list[Batch] = []
        with evaluating(model), torch.no_grad():
            for batch in batches:
                self._add(model, batch)

    def _add(self, model: nn.Module, batch: Batch) -> None:
        named = named_inputs(batch, forward_params(model))
        dec = named.get("decoder_input_ids")
        if not isinstance(dec, torch.Tensor) or dec.dim() != 2:
            raise ExportError(
                "--kv-cache for an encoder-decoder needs example batches with "
                "decoder_input_ids (batch, tokens); pass them with --inputs"
            )
        n = dec.shape[1]
        require_tokens(n, "decoder_input_ids")
        enc = {k: named[k] for k in ENCODER_INPUTS if isinstance(named.get(k), torch.Tensor)}
        if "input_features" in enc:  # speech: a fixed number of frames
            variants = [{"input_features": enc["input_features"]}]
        else:  # the first half of the tokens too, so that the encoder length is dynamic
            half = max(enc["input_ids"].shape[1] // 2, 2)
            variants = [enc, {k: t[:, :half] for k, t in enc.items()}]
        self.encoder_batches += variants
        encoded = [self._encoded(v) for v in variants]
        # split decoder prompt, one-token step (on the shorter encoder input), empty past
        splits = ((n // 2, n, encoded[0]), (n - 2, n - 1, encoded[-1]), (0, n, encoded[0]))
        for past_len, end, (fixed, cross) in splits:
            first = max(past_len, 1)  # an empty past takes its shape from a one-token cache
            past = self.decoder(dec[:, :first], **fixed, cross_key_values=cross)[
                "present_key_values"
            ]
            if past_len == 0:
                past = empty_past(past)
            self.decoder_batches.append(
                {
                    "decoder_input_ids": dec[:, past_len:end],
                    **fixed,
                    "past_key_values": past,
                    "cross_key_values": cross,
                }
            )

    def _encoded(self, enc: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], Past]:
        """The decoder's fixed inputs for encoder batch ``enc``, and its cross K/V."""
        out = self.encoder(**enc)
        fixed = {"encoder_hidden_states": out["encoder_hidden_states"]}
        if "attention_mask" in enc:
            fixed["attention_mask"] = enc["attention_mask"]
        return fixed, out["cross_key_values"]


def kv_reference(
    model: nn.Module, batches: list[Batch], info: ArtifactInfo
) -> tuple[nn.Module, list[Batch]]:
    """The fp32 reference and the batches that check a ``--kv-cache`` file described by
    ``info``: decoder-only, or either file of an encoder-decoder."""
    if not is_encoder_decoder(model):
        return cache_reference(model, batches)
    ref = Seq2SeqReference(model, batches)
    if "encoder_hidden_states" in info.outputs:
        return ref.encoder, ref.encoder_batches
    return ref.decoder, ref.decoder_batches
