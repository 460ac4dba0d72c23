"""The order in which a benchmark times its candidates (its report keeps its own order).

The race (:class:`~halfprec.bench.race.Race`) stops a candidate after ``min_rounds`` once
an accurate candidate timed before it beats it by the race's margin, but the fastest one
so far always runs ``claim_rounds``: every candidate that is faster than all those before
it pays for the full claim. Timing the likely fastest first lets the others stop early.
Two rules, both about cost only (every candidate is still timed, and the choice and its
claimed speedup come from the same rounds of the same pairs):

- every uncompiled candidate before any compiled one: the compile gate judges a compiled
  twin by its eager twin's measurement (:mod:`halfprec.bench.compile_gate`);
- among each, the runtime targets computing in a half dtype first: they run only on CPUs
  with native half kernels (OpenVINO's bf16 needs AVX512-BF16 or AMX), where they are the
  fastest uncompiled candidates measured (docs/benchmarks.md, "Cold bench and deploy").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from halfprec.bench.variants import Variant


def timing_order(variants: Sequence[Variant]) -> list[int]:
    """The indices of ``variants`` other than eager fp32 (the reference, timed in every
    pair) in the order they are timed (see the module docs); ties keep their order."""

    def key(j: int) -> tuple[bool, bool]:
        v = variants[j]
        half_runtime = v.runtime and v.dtype != torch.float32
        return v.compiled, not half_runtime

    return sorted((j for j, v in enumerate(variants) if v != Variant("fp32")), key=key)


def by_expected_gain(
    indices: Sequence[int],
    variants: Sequence[Variant],
    expected: Callable[[Variant], float | None],
) -> list[int]:
    """``indices`` (of ``variants``, one each) by ``expected(variant)``, the least first:
    a compiled candidate's best case, its eager twin's fastest time relative to fp32
    divided by the most compiling can gain. Where a time budget cannot hold every compile
    (:mod:`halfprec.bench.budget`), the likeliest winner is compiled first. Unknown (None)
    last; ties keep their order."""

    def key(pair: tuple[int, Variant]) -> tuple[bool, float]:
        e = expected(pair[1])
        return e is None, 0.0 if e is None else e

    return [j for j, _ in sorted(zip(indices, variants, strict=True), key=key)]
