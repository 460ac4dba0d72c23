"""The share of a converted model's FLOPs that runs in fp32: module islands and op islands.

FLOPs are counted by ``torch.utils.flop_counter`` on one fp32 forward pass (matmul, conv,
attention; elementwise ops count nothing there). The share is an informational figure: where
the counter fails on a model (a kernel it cannot trace), :class:`FlopsUnavailable` says why
and the caller reports "n/a (reason)" instead of stopping. An op island counts its own FLOPs, or one
FLOP per output element for elementwise ops, so the share is an upper bound for them; a
scaled op island (a GEMM computed in half on scaled operands) counts none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from halfprec.batch import call
from halfprec.convert.core import conversion_report
from halfprec.convert.op_islands import OpRef
from halfprec.modules import first_line


class FlopsUnavailable(Exception):
    """torch's FLOP counter failed on a model that runs without it; ``str()`` says why."""


def module_flops(model: nn.Module, batch: Any) -> dict[str, int]:
    """FLOPs of each module of ``model`` (by qualified name, ``""`` the whole model) on one
    forward pass of ``batch``; a module that is never called, or calls no counted op, has
    none (absent). Raises :class:`FlopsUnavailable` when the counter fails on the model."""
    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            call(model, batch)
    except Exception as exc:  # any failure under the counter: the figure is informational
        raise FlopsUnavailable(
            f"torch's FLOP counter failed on {type(model).__name__}: {first_line(exc)}"
        ) from exc
    counts = {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}
    root = type(model).__name__
    out = {"": counter.get_total_flops()}
    for name, _ in model.named_modules():
        key = f"{root}.{name}" if name else root
        if name and key in counts:
            out[name] = counts[key]
    return out


def fp32_flops_share(
    model: nn.Module,
    half: nn.Module,
    batch: Any,
    op_flops: Mapping[OpRef, int],
    flops: Mapping[str, int] | None = None,
) -> float | None:
    """FLOPs of ``half``'s fp32 parts over all FLOPs of ``model`` on ``batch``; None when the
    model has no counted FLOPs. ``flops``: :func:`module_flops` of ``model`` on ``batch``,
    where already counted. Raises :class:`FlopsUnavailable` when they cannot be counted."""
    report = conversion_report(half)
    if report is None:
        return None
    counts = flops if flops is not None else module_flops(model, batch)
    total = counts.get("", 0)
    if not total:
        return None
    fp32 = 0
    islands = sorted(report.islands)
    for name in islands:
        if any(name.startswith(i + ".") for i in islands if i and i != name):
            continue  # counted with the enclosing island
        fp32 += counts.get(name, 0)
    by_site = {ref.site: n for ref, n in op_flops.items()}  # with or without an ordinal
    fp32 += sum(by_site.get(ref.site, 0) for ref in report.op_islands if not ref.scaled)
    return min(1.0, fp32 / total)
