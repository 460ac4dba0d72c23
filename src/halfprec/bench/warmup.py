"""The warm-up calls of one benchmarked variant (:class:`WarmUp`) and its peak device memory.

A variant's first call may compile it; its output is kept (cloned: a module under CUDA
graphs overwrites it on the next call) to be compared with fp32's, and uncompiled fp32's
first call records the model's matrix products. The peak device memory is read from the
device module's allocation counters (:class:`PeakCounters`: ``torch.cuda``, ``torch.xpu``),
reset after a compiling first call, so that max-autotune's benchmarking buffers are not
counted as the variant's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from halfprec.batch import Batch, call
from halfprec.bench.deadline import deadline
from halfprec.bench.limit import Gemm, GemmRecorder
from halfprec.bench.phases import cpu_seconds
from halfprec.bench.variants import Variant
from halfprec.bench.worker import MemoryUse
from halfprec.timing import synchronize
from halfprec.tree import map_tensors

__all__ = ["PeakCounters", "WarmUp", "Warmed", "device_counters"]


class PeakCounters(Protocol):
    """A device module's allocation counters, as ``torch.cuda`` has them: what bench reads
    a variant's peak device memory from (tests pass a stand-in)."""

    def memory_allocated(self, device: Any = None) -> int: ...

    def max_memory_allocated(self, device: Any = None) -> int: ...

    def reset_peak_memory_stats(self, device: Any = None) -> None: ...


def device_counters(device: torch.device) -> PeakCounters | None:
    """The device module with peak-allocation counters (torch.cuda, torch.xpu...), or None."""
    mod = getattr(torch, device.type, None)
    if mod is not None and hasattr(mod, "max_memory_allocated"):
        return mod  # type: ignore[no-any-return]
    return None


def kept(output: Any) -> Any:
    """``output`` detached and cloned, to be read after the module's next call: a module
    under CUDA graphs (``torch.compile(mode="max-autotune")`` on CUDA) returns tensors in
    its graph's memory pool, which the next call overwrites ("accessing tensor output of
    CUDAGraphs that has been overwritten")."""
    return map_tensors(lambda t: t.detach().clone(), output)


@dataclass
class Warmed:
    """What the warm-up calls of one variant left: the first output (cloned), the first
    and last calls' seconds (and the first call's CPU seconds: a compile's), the bytes
    allocated when the peak counter was last reset, and the matrix products of
    uncompiled fp32's first call (by shape, with their counts), its number of distinct
    operations (``ops``), of calls of torch functions (``calls``) and of calls of
    convolutions (``convolutions``: :class:`~halfprec.bench.limit.GemmRecorder`)."""

    before: int = 0
    output: Any = None
    first: float = 0.0
    first_cpu: float = 0.0
    last: float = 0.0
    shapes: dict[Gemm, int] = field(default_factory=dict)
    ops: int = 0
    calls: int = 0
    convolutions: int = 0


@dataclass(frozen=True)
class WarmUp:
    """``calls`` warm-up calls of a variant on ``device`` (a compiled one gets at least 2),
    stopping early when a call after the first (which may compile) exceeds ``max_call_s``;
    ``counters``: the device's allocation counters (None: no device memory is read);
    ``cpu_clock``: what the first call's CPU seconds are read from."""

    device: torch.device
    calls: int
    max_call_s: float
    counters: PeakCounters | None = None
    cpu_clock: Callable[[], float] = cpu_seconds

    def reset_peak(self) -> int:
        """Reset the device's peak counter; the bytes allocated now (0 without counters)."""
        if self.counters is None:
            return 0
        synchronize(self.device)
        self.counters.reset_peak_memory_stats(self.device)
        return int(self.counters.memory_allocated(self.device))

    def run(
        self, module: nn.Module, batch: Batch, variant: Variant, within: float | None = None
    ) -> Warmed:
        """Warm ``module`` up: keeps a clone of the first output (:func:`kept`) and the
        first and last calls' seconds. A compiled variant's first call compiles, so it gets
        at least one call after it (its warm speed plans its runs and the cap), and the
        peak memory counter is reset after it; it is stopped once it has run ``within``
        seconds (None: never), raising :class:`~halfprec.bench.deadline.Overrun`. The first
        call of uncompiled fp32 records the model's matrix products."""
        warm = Warmed(before=self.reset_peak())
        calls = max(self.calls, 2) if variant.compiled else self.calls
        for i in range(calls):
            record = i == 0 and variant == Variant("fp32")
            recorder = GemmRecorder() if record else contextlib.nullcontext()
            start, cpu = time.perf_counter(), self.cpu_clock() if i == 0 else 0.0
            stop = within if i == 0 and variant.compiled else None
            with recorder, deadline(stop):
                out = call(module, batch)
            synchronize(self.device)
            warm.last = time.perf_counter() - start
            if i == 0:
                warm.first_cpu = self.cpu_clock() - cpu
            if isinstance(recorder, GemmRecorder):
                warm.shapes, warm.ops = dict(recorder.seen), len(recorder.ops)
                warm.calls, warm.convolutions = recorder.calls, recorder.convolutions
            if i == 0:
                warm.output, warm.first = kept(out), warm.last
                if variant.compiled:
                    warm.before = self.reset_peak()
            del out
            if warm.last > self.max_call_s and (i > 0 or not variant.compiled):
                break
        return warm

    def peak(self, warm: Warmed, model_bytes: int) -> MemoryUse | None:
        """Peak device memory of the warm calls after the last reset (after the compiling
        call: its autotuning buffers are not the variant's): the module's ``model_bytes``
        (resident at the reset) plus what the calls allocated above what was allocated then.
        None without counters."""
        if self.counters is None:
            return None
        above = int(self.counters.max_memory_allocated(self.device)) - warm.before
        return MemoryUse(model_bytes + above, max(0, above), "max_memory_allocated")
