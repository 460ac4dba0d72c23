"""Runtime targets in ``deploy``: which variants ``runtimes=`` adds, and the rule that lets
one replace the torch choice.

A runtime variant (:mod:`halfprec.runtimes`: OpenVINO, onnxruntime) is checked against fp32
like every other (all elements, the same tolerance) and wins only when it is also faster
than the torch choice by its spread: the interquartile range of the per-round ratios lies
above 1 (each was timed in its own pair with eager fp32, so the ratios are of their times
relative to fp32's in the same round: :func:`~halfprec.bench.results.paired_speed`). A
runtime that is merely as fast, or too noisy to rank, leaves the ordinary torch module in
place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from halfprec.bench.results import BenchResult, VariantResult, paired_speed, relative_time
from halfprec.bench.variants import Variant
from halfprec.bench.ways import WAYS

__all__ = ["default_runtimes", "runtime_rows", "runtime_variants", "with_runtimes"]


def runtime_variants(runtimes: Sequence[str], half: Sequence[torch.dtype]) -> list[Variant]:
    """The variants of ``runtimes`` (the ways run by another runtime:
    :func:`runtime_ways`, or ``"all"``) in fp32 and each of the half dtypes ``half`` that
    the runtime offers."""
    known = runtime_ways()
    names = list(known) if list(runtimes) == ["all"] else list(runtimes)
    unknown = [n for n in names if n not in known]
    if unknown or isinstance(runtimes, str):
        given = runtimes if isinstance(runtimes, str) else unknown[0]
        raise ValueError(
            f"deploy(runtimes={given!r}): unknown runtime; give a sequence of "
            f"{', '.join(map(repr, known))}, or ['all']"
        )
    wanted = (torch.float32, *half)
    return [Variant(r, d) for r in dict.fromkeys(names) for d in WAYS[r].dtypes if d in wanted]


def runtime_ways() -> tuple[str, ...]:
    """The registered ways that another runtime than torch runs (OpenVINO, onnxruntime)."""
    return tuple(n for n, w in WAYS.items() if w.runtime)


def _unavailable(name: str, dtype: torch.dtype, device: torch.device | str) -> str | None:
    return WAYS[name].unavailable(dtype, device)


def default_runtimes(
    half: Sequence[torch.dtype],
    device: torch.device | str = "cpu",
    why_not: Callable[[str, torch.dtype, torch.device | str], str | None] = _unavailable,
) -> list[Variant]:
    """deploy's default runtime variants: each runtime target that is installed and computes
    one of the half dtypes ``half`` on this CPU (OpenVINO's bf16 hint where the CPU has
    AVX512-BF16 or AMX), in that dtype. A runtime that cannot run here is not timed (deploy
    lists it as a skipped row: :func:`runtime_rows`); its fp32 targets are left to an
    explicit ``runtimes=`` (one more conversion each, to win only where torch's fp32 is
    slower). ``why_not``: why a runtime cannot run a dtype here
    (each way's :meth:`~halfprec.bench.ways.base.Way.unavailable`; tests pass another
    machine's answers)."""
    return [
        Variant(r, d)
        for r in runtime_ways()
        for d in WAYS[r].dtypes
        if d in half and why_not(r, d, device) is None
    ]


def runtime_rows(half: Sequence[torch.dtype], device: torch.device | str = "cpu") -> list[Variant]:
    """deploy's default runtime rows: every runtime target in one of the half dtypes
    ``half`` where the model is on the CPU. Those :func:`default_runtimes` leaves out (not
    installed; no half kernels in OpenVINO's CPU plugin, as on a CPU without AVX512-BF16
    or AMX) are ``skipped`` rows whose note says why, so that deploy's summary names them
    rather than leaving them out unsaid."""
    if torch.device(device).type != "cpu":
        return []
    return [Variant(r, d) for r in runtime_ways() for d in WAYS[r].dtypes if d in half]


def with_runtimes(result: BenchResult, choice: VariantResult) -> VariantResult:
    """``choice`` (the fastest accurate torch variant), or the fastest accurate runtime
    variant at its batch size that beats it by its spread (each timed in its own pair with
    eager fp32: compared through their times relative to fp32's, round by round)."""
    rows = result.at(choice.batch_size)
    fp32 = next(r for r in rows if r.variant == Variant("fp32"))
    best, best_s = choice, None
    for row in rows:
        if not row.variant.runtime or row.status != "ok" or not row.accurate:
            continue
        speed = paired_speed(choice, row)
        mine = relative_time(fp32, row)
        if speed is None or not (speed.ranked and speed.q1 > 1.0) or mine is None:
            continue
        if best_s is None or mine < best_s:
            best, best_s = row, mine
    return best
