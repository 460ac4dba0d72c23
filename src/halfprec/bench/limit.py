"""The speed limit of half precision for one model on one device, measured in the same run.

A model that was nothing but matrix products would run in half precision exactly as much
faster as its matrix products do. :func:`gemm_shapes` records the products one forward
call of the model makes (``linear``, ``matmul``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``,
as ``(batch, M, K, N)`` with a call count), and :func:`measure_limit` times them in fp32
and in a half dtype, interleaved round-robin, and returns the ratio of the total times,
each shape weighted by how often the model calls it. A variant's *efficiency* is its
speedup over fp32 divided by this limit.

:func:`measure_slowdown` is the cheap check run first: one product timed in fp32 and in
the half dtype, interleaved, stopping as soon as the half dtype is clearly too slow to be
worth timing (fp16 on a CPU without fp16 kernels runs ~100x slower), so that such a dtype
costs seconds, never minutes. It can call a dtype slow only when the half dtype's fastest
call loses to fp32's upper quartile by the threshold; when in doubt it says *not slow*,
and the dtype is timed instead of skipped. Where the probe stays in doubt, the GEMM limit
at the model's own products, timed next (medians of many samples), can still find the
dtype too slow (:class:`~halfprec.bench.half_speed.HalfSpeed`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from halfprec.batch import Batch, call
from halfprec.timing import synchronize, timed_call


@dataclass(frozen=True, order=True)
class Gemm:
    """``batch`` independent ``(M, K) @ (K, N)`` products."""

    batch: int
    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.k * self.n


def _prod(dims: Any) -> int:
    return math.prod(int(d) for d in dims)


_MATMULS = (torch.matmul, torch.mm, torch.bmm, torch.Tensor.matmul, torch.Tensor.__matmul__)


def _from_call(func: Any, args: tuple[Any, ...]) -> list[Gemm]:
    """The products a call makes (none when it is not a float matrix product).
    ``scaled_dot_product_attention`` counts as its two products, scores and values."""
    F = torch.nn.functional
    tensors = [a for a in args[:3] if isinstance(a, torch.Tensor)]
    if len(tensors) < 2 or not all(t.is_floating_point() for t in tensors[:2]):
        return []
    if func is F.linear and tensors[1].dim() == 2:
        x, w = tensors[0], tensors[1]
        return [Gemm(1, _prod(x.shape[:-1]), int(x.shape[-1]), int(w.shape[0]))]
    if func is F.scaled_dot_product_attention and len(tensors) == 3:
        q, k, v = tensors
        heads, rows, inner = _prod(q.shape[:-2]), int(q.shape[-2]), int(q.shape[-1])
        keys = int(k.shape[-2])
        return [Gemm(heads, rows, inner, keys), Gemm(heads, rows, keys, int(v.shape[-1]))]
    if func in (torch.addmm, torch.baddbmm) and len(tensors) == 3:
        a, b = tensors[1], tensors[2]
    elif func in _MATMULS:
        a, b = tensors[0], tensors[1]
    else:
        return []
    if a.dim() < 2 or b.dim() < 2:
        return []
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return [Gemm(_prod(batch), int(a.shape[-2]), int(a.shape[-1]), int(b.shape[-1]))]


class GemmRecorder(TorchFunctionMode):
    """Inside ``with GemmRecorder() as rec:``, counts the matrix products torch calls make
    (``rec.seen``), keeps the distinct operations (``rec.ops``: each torch function's
    name with its tensor operands' shapes), counts every call (``rec.calls``: what a
    compile traces, one graph node each) and the calls of convolutions
    (``rec.convolutions``; :mod:`halfprec.bench.budget` estimates a compile from all
    three); everything runs as usual."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[Gemm] = Counter()
        self.ops: set[tuple[str, tuple[tuple[int, ...], ...]]] = set()
        self.calls = 0
        self.convolutions = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        for gemm in _from_call(func, args):
            if gemm.flops > 0:
                self.seen[gemm] += 1
        shapes = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
        name = getattr(func, "__name__", repr(func))
        self.ops.add((name, shapes))
        self.calls += 1
        self.convolutions += name.startswith(("conv", "_conv"))
        return func(*args, **(kwargs or {}))


def gemm_shapes(model: nn.Module, batch: Batch) -> dict[Gemm, int]:
    """The matrix products one forward call of ``model`` on ``batch`` makes, with counts."""
    with torch.inference_mode(), GemmRecorder() as recorder:
        call(model, batch)
    return dict(recorder.seen)


def probe_gemm(shapes: dict[Gemm, int], max_rows: int = 128) -> Gemm:
    """The product worth probing: the one the model spends most FLOPs on, cut to
    ``max_rows`` rows so that a slow dtype costs a second, not minutes, and grown to at
    least ``64x256x256`` (BERT-base's MLP ``128x768x3072`` when nothing was recorded)."""
    if not shapes:
        return Gemm(1, max_rows, 768, 3072)
    g = max(shapes, key=lambda s: (s.flops * shapes[s], s))
    # tiny products time call overhead and noise, not kernels: probe at least 64x256x256
    return Gemm(1, min(max(g.m, 64), max_rows), max(g.k, 256), max(g.n, 256))


def first_look(gemm: Gemm, rows: int = 32) -> Gemm:
    """The probe's first, cheaper product: ``gemm`` cut to ``rows`` rows where it has at
    least 4 times as many (``gemm`` itself otherwise). An emulated half dtype is as slow
    there as at the full product (BERT-base's ``128x768x3072`` in emulated bf16 took 2.2 s
    a call on a loaded Zen 3, so the full probe's 4 calls of each dtype cost 25 s of a cold
    deploy there; at 32 rows 7.8-8.9x slower, at 128 rows 20-33x); a dtype it finds slow
    is skipped by it, every other one is probed at ``gemm``."""
    if gemm.m < 4 * rows:
        return gemm
    return Gemm(gemm.batch, rows, gemm.k, gemm.n)


def _operands(gemm: Gemm, dtype: torch.dtype, device: torch.device) -> Callable[[], object]:
    gen = torch.Generator().manual_seed(0)
    shape_a = (gemm.m, gemm.k) if gemm.batch == 1 else (gemm.batch, gemm.m, gemm.k)
    shape_b = (gemm.k, gemm.n) if gemm.batch == 1 else (gemm.batch, gemm.k, gemm.n)
    a = torch.randn(shape_a, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(shape_b, generator=gen).to(device=device, dtype=dtype)
    op = torch.mm if gemm.batch == 1 else torch.bmm
    return lambda: op(a, b)


@dataclass(frozen=True)
class GemmLimit:
    """fp32 time / half time of the model's matrix products (above 1: half is faster).
    ``method``: ``"gemm"`` (timed at the model's shapes) or ``"probe"`` (the dtype was
    too slow to time; the ratio is the probe's). ``fp32_s``: the seconds one call of the
    model spends in these products in fp32, each product's fastest sample times its count
    (None for a probe's ratio); the compile gate bounds what compiling fp32 can gain by it
    (:mod:`halfprec.bench.compile_gate`)."""

    dtype: torch.dtype
    ratio: float
    method: str
    shapes: int = 0
    fp32_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "method": self.method,
            "shapes": self.shapes,
            "fp32_s": self.fp32_s,
        }


BatchTimer = Callable[[Callable[[], object], int], float]
"""Times ``calls`` back-to-back calls of a product: ``timer(fn, calls) -> seconds`` for
all of them. The default is :func:`back_to_back`; tests pass scripted timings."""


def back_to_back(fn: Callable[[], object], calls: int, device: torch.device | str = "cpu") -> float:
    """Seconds ``calls`` back-to-back calls of ``fn`` take on ``device``: one synchronisation
    after the last call, not one per call. On an accelerator the time is read from device
    events recorded around the calls (``torch.Event``), so that the host's launch and sync
    cost, as long as a fast kernel on CUDA, is not counted; on the CPU from the wall clock."""
    dev = torch.device(device)
    if dev.type == "cpu":
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - start
    begin, end = (torch.Event(device=dev, enable_timing=True) for _ in range(2))
    begin.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1000.0  # milliseconds


def _calls_for(seconds: float, target_s: float = 2e-3, most: int = 64) -> int:
    """How many back-to-back calls make one sample of about ``target_s`` seconds."""
    return max(1, min(most, int(target_s / max(seconds, 1e-9))))


def measure_limit(
    shapes: dict[Gemm, int],
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    *,
    runs: int = 5,
    budget_s: float = 20.0,
    timer: BatchTimer | None = None,
) -> GemmLimit:
    """fp32 time / ``dtype`` time of ``shapes`` (each weighted by its count), in eager
    kernels, timed interleaved: every round times each shape in fp32 then in ``dtype``.
    Each sample is a run of back-to-back calls (:func:`back_to_back`, as many as take about
    2 ms after one warm-up call: a product of a few microseconds is timed, not its launch
    and sync), divided by their number; a given ``timer`` times the warm-up call too. The
    shapes go costliest first (count x flops), each warmed just before its first sample,
    and the timing stops once ``budget_s`` is spent, mid-round too (at least the costliest
    shape is timed): the ratio is then over the shapes timed (``GemmLimit.shapes``). One
    round of every shape in an emulated dtype took 108.8 s of a SegFormer-b0 deploy at load
    20 where its share of the budget was about 10 s."""
    dev = torch.device(device)
    if not shapes:
        return GemmLimit(dtype, 1.0, "gemm", 0)
    clock = timer or (lambda fn, calls: back_to_back(fn, calls, dev))
    # the warm-up call sizes each sample; an injected timer times it too, so that a test's
    # scripted device alone decides the counts (not the wall clock of a loaded machine)
    warm_up = (lambda fn: clock(fn, 1)) if timer else (lambda fn: timed_call(fn, dev))
    calls = {(g, dt): _operands(g, dt, dev) for g in shapes for dt in (torch.float32, dtype)}
    samples: dict[tuple[Gemm, torch.dtype], list[float]] = {key: [] for key in calls}
    repeats: dict[tuple[Gemm, torch.dtype], int] = {}
    order = sorted(shapes, key=lambda g: -shapes[g] * g.flops)
    start = time.perf_counter()
    with torch.inference_mode():
        for _ in range(runs):
            for g in order:
                keys = [(g, torch.float32), (g, dtype)]
                for key in keys:
                    if key not in repeats:  # its warm-up call sizes its samples
                        repeats[key] = _calls_for(warm_up(calls[key]))
                for key in keys:
                    samples[key].append(clock(calls[key], repeats[key]) / repeats[key])
                if time.perf_counter() - start > budget_s:
                    break
            if time.perf_counter() - start > budget_s:
                break
    timed = {g: count for g, count in shapes.items() if samples[(g, dtype)]}
    total = {
        dt: sum(count * statistics.median(samples[(g, dt)]) for g, count in timed.items())
        for dt in (torch.float32, dtype)
    }
    ratio = total[torch.float32] / total[dtype] if total[dtype] > 0 else 1.0
    fastest = sum(count * min(samples[(g, torch.float32)]) for g, count in timed.items())
    return GemmLimit(dtype, ratio, "gemm", len(timed), fastest)


Timer = Callable[[Callable[[], object], torch.dtype], float]
"""Times one call of a probe's product: ``timer(fn, dtype) -> seconds``. The default calls
``fn`` and synchronises the device around a wall clock; tests pass fake timings."""


@dataclass(frozen=True)
class Slowdown:
    """How many times slower one product runs in ``dtype`` than in fp32 (below 1: faster),
    from ``rounds`` interleaved pairs of calls.

    ``ratio`` is median over median. ``low`` is the least it can be: the fastest half call
    over fp32's upper quartile, so load that slows some of fp32's calls (a quarter of them
    or fewer: the rest bound the quartile) or some of the half dtype's (all but one) can
    only lower it. ``high`` is the most it can be, the half dtype's upper quartile over
    fp32's fastest call. ``slow`` is the verdict, ``low > give_up_at``: a dtype is skipped
    only when even its best call loses by that factor to fp32's calls (all but the slowest
    quarter), which a fast dtype cannot do. A quartile rather than the slowest call: with
    the slowest, a single fp32 call held up by another process (a 15 ms product
    descheduled for 100 ms) kept an emulated bf16, 8x slower in every call, "in doubt",
    and every round added in doubt could only lower ``low`` further, never settle it.
    """

    dtype: torch.dtype
    ratio: float
    low: float
    high: float
    rounds: int
    slow: bool


def _upper_quartile(times: list[float]) -> float:
    """The third quartile of ``times`` (their largest below four samples: with so few,
    nothing tells an outlier from the rest)."""
    if len(times) < 4:
        return max(times)
    return statistics.quantiles(times, n=4, method="inclusive")[2]


def _slowdown(
    dtype: torch.dtype, fp32: list[float], half: list[float], give_up_at: float
) -> Slowdown:
    typical, best = _upper_quartile(fp32), min(fp32)
    if best <= 0:  # a clock too coarse to see the call: no evidence of slowness
        return Slowdown(dtype, 1.0, 0.0, math.inf, len(half), False)
    ratio = statistics.median(half) / statistics.median(fp32)
    low, high = min(half) / typical, _upper_quartile(half) / best  # low <= ratio <= high
    return Slowdown(dtype, ratio, low, high, len(half), low > give_up_at)


_PROBES: dict[tuple[str, int, torch.dtype, Gemm, float], Slowdown] = {}


def measure_slowdown(
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    gemm: Gemm = Gemm(1, 128, 768, 3072),
    *,
    give_up_at: float = 3.0,
    rounds: int = 5,
    max_rounds: int = 15,
    timer: Timer | None = None,
) -> Slowdown:
    """Time ``gemm`` in fp32 and in ``dtype``, interleaved: each round calls fp32 then
    ``dtype`` once, after one warm-up call of each.

    It stops early, after 3 rounds, once the dtype is clearly slow (``low > 2 *
    give_up_at``: a dtype ~100x slower costs 3 timed calls, seconds); otherwise it runs
    ``rounds`` rounds, and keeps adding rounds, up to ``max_rounds``, while the verdict is
    in doubt (the range from ``low`` to ``high`` straddles ``give_up_at``). In doubt at
    the end, the verdict is *not slow*: the caller times the dtype instead of skipping it.

    With the default wall-clock ``timer`` the result is cached for the process, per
    device, thread count, dtype, product and ``give_up_at``; a given ``timer`` is never
    cached. (:func:`clear_probe_cache` forgets.)
    """
    if not 1 <= rounds <= max_rounds:
        raise ValueError(
            f"measure_slowdown(rounds={rounds}, max_rounds={max_rounds}): need "
            "1 <= rounds <= max_rounds"
        )
    dev = torch.device(device)
    key = (str(dev), torch.get_num_threads(), dtype, gemm, give_up_at)
    if timer is None and key in _PROBES:
        return _PROBES[key]
    clock = timer or (lambda fn, _dtype: timed_call(fn, dev))
    fp32 = _operands(gemm, torch.float32, dev)
    half = _operands(gemm, dtype, dev)
    fp32_s: list[float] = []
    half_s: list[float] = []
    with torch.inference_mode():
        fp32()  # warm-up: one-time costs (allocation, kernel selection) are not timed
        half()
        synchronize(dev)
        for done in range(1, max_rounds + 1):
            fp32_s.append(clock(fp32, torch.float32))
            half_s.append(clock(half, dtype))
            found = _slowdown(dtype, fp32_s, half_s, give_up_at)
            if found.low > 2 * give_up_at and done >= min(3, rounds):
                break  # clearly slow: far past the threshold in every call
            doubt = found.low <= give_up_at < found.high
            if done >= rounds and not doubt:
                break
    if timer is None:
        _PROBES[key] = found
    return found


def clear_probe_cache() -> None:
    """Forget the probes :func:`measure_slowdown` cached in this process."""
    _PROBES.clear()


def probe_slowdown(
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    gemm: Gemm = Gemm(1, 128, 768, 3072),
    *,
    give_up_at: float = 3.0,
    timer: Timer | None = None,
) -> float:
    """How many times slower one ``gemm`` runs in ``dtype`` than in fp32 (below 1: faster):
    the ``ratio`` of :func:`measure_slowdown` (see there for the rounds and the cache). The
    default shape is a row slice of BERT-base's MLP, big enough that CPU kernels which slow
    down only above a size show it."""
    return measure_slowdown(dtype, device, gemm, give_up_at=give_up_at, timer=timer).ratio
