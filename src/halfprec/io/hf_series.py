"""Example inputs of a Hugging Face time-series model, built from its config.

PatchTST and PatchTSMixer read ``past_values`` alone: ``context_length`` steps of
``num_input_channels`` series. TimeSeriesTransformer, Informer and Autoformer (a config with
``lags_sequence`` and ``num_time_features``) read a longer past, ``context_length +
max(lags_sequence)`` steps, with its time features (``num_time_features +
num_dynamic_real_features`` per step) and an all-ones observed mask, plus the static features
the config declares; where ``forward`` takes them, ``prediction_length`` future values and
their time features too, so the decoder and the distribution head run, as in the models'
own documented forward call.

The series are synthetic (no real one ships): a daily and a weekly period, a trend and seeded
noise; the time features are the calendar position of each step (hour of day, day of week as
sine waves in [-1, 1]) and its age (``log10(2 + t)``), GluonTS's features for hourly data.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def takes_time_features(config: Any) -> bool:
    """True for a config of the lagged, time-featured kind (TimeSeriesTransformer, Informer,
    Autoformer)."""
    return hasattr(config, "lags_sequence") and hasattr(config, "num_time_features")


def _int(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    return int(value) if isinstance(value, int) else 0


def _curves(rows: int, steps: int, channels: int, seed: int) -> torch.Tensor:
    """``rows`` x ``steps`` x ``channels`` seasonal series (see the module docs)."""
    t = torch.arange(steps, dtype=torch.float32)[None, :, None]
    gen = torch.Generator().manual_seed(seed)
    phase = torch.rand(rows, 1, channels, generator=gen) * 2 * math.pi
    day = torch.sin(2 * math.pi * t / 24 + phase)
    week = 0.5 * torch.sin(2 * math.pi * t / 168 + phase)
    noise = 0.1 * torch.randn(rows, steps, channels, generator=gen)
    return day + week + 0.01 * t + noise


def _time_features(rows: int, start: int, steps: int, count: int) -> torch.Tensor:
    """``count`` features per step: hour of day and day of week (sine), then age."""
    t = torch.arange(start, start + steps, dtype=torch.float32)
    columns = [torch.sin(2 * math.pi * t / 24), torch.sin(2 * math.pi * t / 168)]
    columns += [torch.log10(2 + t)] * max(0, count - 2)
    if count == 0:  # a config without time features still takes the (empty) tensor
        return torch.zeros(rows, steps, 0)
    return torch.stack(columns[:count], dim=-1)[None].expand(rows, -1, -1).contiguous()


def forecast_inputs(config: Any, takes: set[str], rows: int) -> tuple[dict[str, torch.Tensor], str]:
    """The inputs a forecasting model's ``forward`` takes (of ``takes``), ``rows`` series
    each, and a sentence saying what was built from which config fields. Raises
    :class:`ValueError` naming the missing config field."""
    context = _int(config, "context_length")
    if context <= 0:
        raise ValueError("takes past_values but its config has no context_length")
    if not takes_time_features(config):
        channels = _int(config, "num_input_channels") or 1
        return {"past_values": _curves(rows, context, channels, 0)}, (
            f"past_values: {context} steps of {channels} synthetic seasonal series "
            "(context_length, num_input_channels; no real one ships)"
        )
    lags = [int(x) for x in getattr(config, "lags_sequence", None) or ()]
    if not lags:
        raise ValueError("takes lagged past_values but its config's lags_sequence is empty")
    past = context + max(lags)
    features = _int(config, "num_time_features") + _int(config, "num_dynamic_real_features")
    size = _int(config, "input_size") or 1
    horizon = _int(config, "prediction_length")

    def series(start: int, steps: int, seed: int) -> torch.Tensor:
        curves = _curves(rows, start + steps, size, seed)[:, start:]
        return curves if size > 1 else curves[..., 0]

    out = {
        "past_values": series(0, past, 0),
        "past_time_features": _time_features(rows, 0, past, features),
        "past_observed_mask": torch.ones(rows, past, *((size,) if size > 1 else ())),
    }
    if "future_values" in takes and horizon > 0:
        out["future_values"] = series(past, horizon, 0)
        out["future_time_features"] = _time_features(rows, past, horizon, features)
    statics = _int(config, "num_static_categorical_features")
    if statics:
        cards = [int(c) for c in getattr(config, "cardinality", None) or [1] * statics]
        out["static_categorical_features"] = torch.tensor(
            [[i % c for c in cards] for i in range(rows)]
        )
    reals = _int(config, "num_static_real_features")
    if reals:
        out["static_real_features"] = torch.ones(rows, reals)
    built = (
        f"{', '.join(out)}: {past} steps (context_length {context} + max(lags_sequence) "
        f"{max(lags)}) of {rows} synthetic seasonal series, {features} time features a step "
        "(num_time_features + num_dynamic_real_features: hour of day, day of week, age), "
        "an all-ones observed mask"
        + (f", and {horizon} future steps (prediction_length)" if "future_values" in out else "")
    )
    return {k: v for k, v in out.items() if k in takes}, built
