"""The caller's objects are set aside from the collector while a benchmark runs, and only
then (scripted timings; real collections)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import torch
from torch import nn

from halfprec import BenchConfig
from halfprec.bench.heap import caller_objects_set_aside
from halfprec.bench.runner import Benchmark
from halfprec.bench.variants import Variant

X = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
TEN = BenchConfig(warmup=1, runs=10, memory="none", skip_slower_than=None, limit=False)


class _Node:
    """A reference cycle of one object, seen through a weak reference."""

    def __init__(self) -> None:
        self.me = self


def test_the_callers_objects_are_set_aside_while_the_run_times_and_given_back_after() -> None:
    frozen: list[int] = []

    def timer(fn: Callable[[], object], variant: Variant) -> float:
        frozen.append(gc.get_freeze_count())
        return {"fp32": 1.0, "halfprec-bf16": 0.5}[variant.name]

    torch.manual_seed(0)
    variants = [Variant("fp32"), Variant.parse("halfprec-bf16")]
    result = Benchmark(nn.Linear(16, 16), X, variants=variants, options=TEN, timer=timer).run()
    assert result.result.get("halfprec-bf16").status == "ok"
    assert frozen and min(frozen) > 0  # each full collection of the run skipped them
    assert gc.get_freeze_count() == 0  # and none stays frozen


def test_what_the_run_makes_is_collected_and_what_the_caller_left_is_after() -> None:
    before = _Node()
    left = weakref.ref(before)
    with caller_objects_set_aside():
        del before
        made = _Node()
        ours = weakref.ref(made)
        del made
        gc.collect()
        assert ours() is None  # the run's own garbage is collected inside
        assert left() is not None  # the caller's is not walked
    gc.collect()
    assert left() is None


def test_a_freeze_of_the_callers_is_neither_added_to_nor_undone() -> None:
    # Read by what collections do, not by gc.get_freeze_count(): a frozen object freed by
    # its reference count leaves the frozen set, so the count can fall at any moment.
    before = _Node()
    gc.freeze()  # the caller's freeze: `before` is in it
    try:
        left = weakref.ref(before)
        del before
        between = _Node()  # made after the caller's freeze, before the run
        later = weakref.ref(between)
        with caller_objects_set_aside():
            del between
            gc.collect()
            assert later() is None  # the run froze nothing more on the way in
        gc.collect()
        assert left() is not None  # the caller's freeze still holds on the way out
    finally:
        gc.unfreeze()
    gc.collect()
    assert left() is None
