"""What a benchmark learns of each half dtype's matrix-product speed on its device
(:class:`HalfSpeed`): the quick probe's slowdown at the model's costliest product, with the
verdict that skips a dtype far slower than fp32, and the eager GEMM ratio at each batch
size's recorded products (:mod:`halfprec.bench.limit`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from halfprec.bench.limit import (
    BatchTimer,
    Gemm,
    GemmLimit,
    Slowdown,
    Timer,
    first_look,
    measure_limit,
    measure_slowdown,
    probe_gemm,
)
from halfprec.bench.machine import machine_key
from halfprec.bench.probe_cache import ProbeCache, cache_dir
from halfprec.bench.results import BenchConfig
from halfprec.dtypes import DeviceSupport, dtype_name

# Where the device table says a dtype has no fast kernels, its variants can gain only by
# moving fewer bytes, never by computing faster: a model whose own products run this many
# times slower in it is skipped (MobileViT-small, mostly convolutions and small products, at
# two threads on a Zen 3: bf16 and fp16 2.1-3.3x slower by its own products, the probe's one
# product in doubt at 1.3-2.6x, and each compiled half variant cost minutes of a cold deploy).
EMULATED_LIMIT = 1.5


@dataclass
class HalfSpeed:
    """The probe and the limits of ``dtypes`` on ``device``, as ``config`` asks for them
    (``probe_timer``: the probe's clock; tests pass scripted timings, and the disk cache
    is then left alone; ``limit_timer``: the limit's, likewise). ``support``: the device's
    row of the device table (:func:`~halfprec.dtypes.device_support`), which settles a
    probe left in doubt: where it says the device has no fast kernels for the dtype and
    the probe's medians put it past the limit, the dtype is skipped. ``skips``: why a
    dtype is not timed; ``slowdowns``: each probed dtype's half/fp32 time;
    ``gemm_ratios``: each dtype's eager GEMM ratio at the first batch size."""

    device: torch.device
    dtypes: Sequence[torch.dtype]
    config: BenchConfig
    probe_timer: Timer | None = None
    support: DeviceSupport | None = None
    limit_timer: BatchTimer | None = None
    skips: dict[torch.dtype, str] = field(default_factory=dict)
    slowdowns: dict[torch.dtype, float] = field(default_factory=dict)
    gemm_ratios: dict[torch.dtype, float] = field(default_factory=dict)

    def probe(self, shapes: dict[Gemm, int]) -> list[str]:
        """Probe each half dtype at the model's costliest product (of ``shapes``), first at
        a quarter of its rows where it has 128 (:func:`~halfprec.bench.limit.first_look`:
        a dtype found slow there is skipped, any other probed at the full product);
        skip it only when the probe is sure it is too slow
        (:func:`~halfprec.bench.limit.measure_slowdown`). A verdict cached for this machine
        (:mod:`halfprec.bench.probe_cache`) is used instead of probing again; only a sure
        one is cached (slow, or fast even by the half dtype's upper quartile): a "not slow"
        in doubt, read on a loaded machine, would otherwise stand for every later run here.
        Returns the cache's warnings."""
        limit = self.config.skip_slower_than
        if limit is None:
            return []
        gemm = probe_gemm(shapes)
        folder = cache_dir() if self.config.probe_cache and self.probe_timer is None else None
        cache = None if folder is None else ProbeCache(folder, machine_key(self.device))
        look = first_look(gemm)
        for dtype in self.dtypes:
            # a first look, 3 rounds: an emulated dtype costs a quarter of the full product
            probed = look
            probe, source = self._measure(
                dtype, look, limit, cache, rounds=3 if look != gemm else 5
            )
            if look != gemm and not probe.slow:  # not slow there: the full product
                probed = gemm
                probe, source = self._measure(dtype, gemm, limit, cache)
            self.slowdowns[dtype] = probe.ratio
            at = f"probe at {probed.m}x{probed.k}x{probed.n}"
            if probe.slow:
                self.skips[dtype] = _slower(
                    dtype,
                    probe.ratio,
                    f"{at}, at least {probe.low:.1f}x in {probe.rounds} rounds{source}; "
                    f"limit {limit:g}x",
                )
            elif probe.ratio > limit and self.support is not None and not self.support.fast(dtype):
                self.skips[dtype] = _slower(
                    dtype,
                    probe.ratio,
                    f"{at}, by the medians of {probe.rounds} rounds, in doubt under load; "
                    f"{self.support.name} has no fast {dtype_name(dtype)} kernels; "
                    f"limit {limit:g}x",
                )
        return [] if cache is None else list(cache.notes)

    def _measure(
        self,
        dtype: torch.dtype,
        gemm: Gemm,
        limit: float,
        cache: ProbeCache | None,
        rounds: int = 5,
    ) -> tuple[Slowdown, str]:
        """``dtype``'s probe at ``gemm``, from ``cache`` where it holds one (with the note
        ``, cached <when>``), else measured and, when sure, cached."""
        hit = None if cache is None else cache.get(dtype, gemm, limit)
        if hit is not None:
            return hit[0], f", cached {hit[1]}"
        # fp32's side under the caller's settings, as the model's fp32 runs
        probe = measure_slowdown(
            dtype, self.device, gemm, give_up_at=limit, rounds=rounds, timer=self.probe_timer
        )
        if cache is not None and (probe.slow or probe.high <= limit):
            cache.put(probe, gemm, limit)  # a verdict in doubt is probed again
        return probe, ""

    def limits(
        self, shapes: dict[Gemm, int], most_s: float | None = None
    ) -> dict[torch.dtype, GemmLimit]:
        """Each half dtype's eager GEMM ratio at ``shapes`` (the products fp32 just
        recorded; the probe's ratio for a skipped dtype: timing it would take minutes). The
        first batch size's ratios are kept in ``gemm_ratios``. ``most_s``: the seconds each
        dtype may take, below ``limit_budget_s`` (a time budget's share; at least the
        costliest product is timed: :func:`~halfprec.bench.limit.measure_limit`)."""
        limits = {}
        for dtype in self.dtypes:
            if dtype in self.skips and dtype in self.slowdowns:
                limits[dtype] = GemmLimit(dtype, 1 / self.slowdowns[dtype], "probe", 1)
            elif dtype in self.skips:  # found slow by its limit at an earlier batch size
                continue
            elif self.config.limit:
                limits[dtype] = measure_limit(
                    shapes,
                    dtype,
                    self.device,
                    budget_s=min(self.config.limit_budget_s, most_s or math.inf),
                    timer=self.limit_timer,
                )
                self._skip_by_limit(limits[dtype])
        for dt, lim in limits.items():
            self.gemm_ratios.setdefault(dt, lim.ratio)
        return limits

    def _skip_by_limit(self, lim: GemmLimit) -> None:
        """Skip ``lim``'s dtype where the model's own products, timed at the first batch
        size (the median of many interleaved samples each), ran ``skip_slower_than`` times
        slower than fp32's (:data:`EMULATED_LIMIT` times, where the device table says the
        device has no fast kernels for the dtype): the probe's one product stayed in doubt
        (a loaded machine, or products too small to show the emulation), but
        no way of running the model in that dtype calls faster kernels (compiling keeps
        the dtype's GEMMs), so building, compiling and timing it would only cost minutes."""
        limit = self.config.skip_slower_than
        first = lim.dtype not in self.gemm_ratios
        if limit is None or not first or lim.ratio <= 0:
            return
        emulated = self.support is not None and not self.support.fast(lim.dtype)
        if emulated:  # no kernel of the dtype can win back a clear loss at its own products
            limit = min(limit, EMULATED_LIMIT)
        if 1 / lim.ratio <= limit:
            return
        probed = self.slowdowns.get(lim.dtype)
        doubt = "" if probed is None else f"; the probe's one product read {probed:.1f}x, in doubt"
        table = (
            f"; {self.support.name} has no fast {dtype_name(lim.dtype)} kernels"
            if emulated and self.support is not None
            else ""
        )
        self.skips[lim.dtype] = _slower(
            lim.dtype,
            1 / lim.ratio,
            f"the model's {lim.shapes} products, the medians of interleaved samples{doubt}"
            f"{table}; limit {limit:g}x",
        )

    def ratio(self, dtype: torch.dtype) -> float | None:
        """``dtype``'s eager half/fp32 GEMM ratio: the limit's, else the probe's."""
        ratio = self.gemm_ratios.get(dtype)
        if ratio is None and dtype in self.slowdowns:
            ratio = 1 / self.slowdowns[dtype]
        return ratio


def _slower(dtype: torch.dtype, ratio: float, evidence: str) -> str:
    """Why ``dtype`` is skipped: its matmuls run ``ratio`` times slower than fp32's, by
    ``evidence``."""
    return (
        f"{dtype_name(dtype)} matmuls run {ratio:.1f}x slower than fp32 on this device ({evidence})"
    )
