"""diagnose runs each module again on state it was handed as its fp32 call saw it: a cache
object the call appends to (a transformers decoder's keys and values) is copied before the
call, so a module that runs fine in half is not flagged "raises"."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from halfprec import diagnose


class KeyCache:
    """A decoder's cache as transformers keeps one: keys appended per layer, per call."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []

    def update(self, key: torch.Tensor) -> torch.Tensor:
        self.keys.append(key)
        return torch.cat(self.keys, dim=1)


class CachedAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, cache: KeyCache) -> torch.Tensor:
        keys = cache.update(self.proj(x))  # keys of earlier steps and this one
        return (x @ keys.transpose(1, 2)).softmax(-1) @ keys


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = CachedAttention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, KeyCache())


def test_a_module_that_appends_to_a_cache_is_not_flagged_as_raising() -> None:
    torch.manual_seed(0)
    diag = diagnose(Decoder(), torch.randn(2, 4, 8), "fp16")
    attn = diag["attn"]
    assert attn.local_exception is None and "raises" not in attn.flags
    assert 0 < attn.local_error < 1e-2  # measured, not skipped
    assert diag.passed


def test_cached_fp32_keys_are_run_again_in_half() -> None:
    """Keys of earlier steps in the cache (fp32, as the fp32 call had them) are cast to the
    half dtype for the run again, as the half model would have stored them."""
    torch.manual_seed(0)
    attn = CachedAttention()
    cache = KeyCache()
    cache.keys.append(torch.randn(2, 4, 8))

    class Step(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = attn

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            step = KeyCache()
            step.keys = list(cache.keys)
            return self.attn(torch.cat([x, x], dim=1), step)

    diag = diagnose(Step(), torch.randn(2, 4, 8), "bf16")
    assert diag["attn"].local_exception is None and diag["attn"].local_error > 0


@pytest.mark.slow
def test_whisper_decoder_attention_is_measured_not_flagged() -> None:
    from testbed.hf_tiny import build

    model = build("whisper")
    torch.manual_seed(0)
    features = torch.randn(2, model.config.num_mel_bins, 2 * model.config.max_source_positions)
    batch = {"input_features": features, "decoder_input_ids": torch.tensor([[1, 5, 7, 9]] * 2)}
    diag = diagnose(model, batch, "fp16")
    for name in ("self_attn", "encoder_attn"):
        record = diag[f"model.decoder.layers.0.{name}"]
        assert record.local_exception is None, record.local_exception
        assert record.local_error > 0
