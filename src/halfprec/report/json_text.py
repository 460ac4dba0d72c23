"""``--json`` text: strict JSON that every parser reads. Imports nothing heavy, so a
command that prints JSON (``lint --json``) starts without torch."""

from __future__ import annotations

import json
import math
from typing import Any

_JSON_DEPTH = 64  # deeper values are cut: json.dumps(indent=...) recurses once a level


def strict_json(value: Any, _depth: int = 0) -> Any:
    """``value`` with every non-finite float written as the string ``"inf"``, ``"-inf"`` or
    ``"nan"``, so that the text is strict JSON (``jq``, ``JSON.parse``). A list or object
    nested deeper than 64 levels is written as the string ``"..."``, so rendering never
    runs out of stack (recipes refuse such ``info`` when they are read)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (dict, list, tuple)) and _depth >= _JSON_DEPTH:
        return "..."
    if isinstance(value, dict):
        return {k: strict_json(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v, _depth + 1) for v in value]
    return value


def to_json_text(data: dict[str, Any]) -> str:
    """``--json`` output: strict JSON (no ``Infinity``/``NaN``; see :func:`strict_json`)."""
    return json.dumps(strict_json(data), indent=2, default=str, allow_nan=False)
