"""A variant's speed against eager fp32 with its spread: the per-round ratios over the rounds
of its pair with fp32 (the runner alternates their timed calls round by round)."""

from __future__ import annotations

from typing import Any

from halfprec.bench.results import BenchResult, VariantResult, paired_speed
from halfprec.bench.variants import Variant
from halfprec.timing import Ratio


def variant_speed(result: BenchResult, row: VariantResult) -> Ratio | None:
    """``row``'s speed against eager fp32 at its batch size, from the rounds both were timed
    in; None for fp32 itself and for a variant (or an fp32) that was not timed."""
    if row.timing is None or row.status not in ("ok", "capped") or row.variant == Variant("fp32"):
        return None
    fp32 = next((r for r in result.at(row.batch_size) if r.variant == Variant("fp32")), None)
    return None if fp32 is None else paired_speed(fp32, row)


def spread_json(result: BenchResult) -> dict[str, Any]:
    """``result.to_json()`` with each variant's ``speedup_spread`` (null where untimed)."""
    data = result.to_json()
    for row, entry in zip(result.results, data["results"], strict=True):
        speed = variant_speed(result, row)
        entry["speedup_spread"] = None if speed is None else speed.to_json()
    return data
