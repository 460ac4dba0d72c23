"""``benchmarks/verify_choice.py``'s own timing rule, apart from deploy's: each block's sample
is the mean of warm calls, whichever variant ran before it (injected clock; the run itself
is a benchmark, not a test)."""

from __future__ import annotations

import functools
import runpy
from typing import Any

import pytest

from halfprec.timing import Stopwatch
from support import ROOT

SCRIPT = ROOT / "benchmarks" / "verify_choice.py"


class _Switching:
    """Two callables on one injected clock: a call right after the other one's is cold
    (``cold`` seconds: the caches hold the other's data), else ``warm``."""

    def __init__(self) -> None:
        self.now, self.last = 0.0, ""
        self.calls: dict[str, int] = {"fp32": 0, "choice": 0}

    def fn(self, name: str, cold: float, warm: float) -> functools.partial[None]:
        return functools.partial(self._call, name, cold, warm)

    def _call(self, name: str, cold: float, warm: float) -> None:
        self.now += warm if self.last == name else cold
        self.last = name
        self.calls[name] += 1


@pytest.mark.parametrize(
    ("fp32", "choice"), [((0.02, 0.011), (0.006, 0.003)), ((0.5, 0.4), (1e-4, 5e-5))]
)
def test_each_block_is_timed_on_warm_calls_in_both_orders(
    fp32: tuple[float, float], choice: tuple[float, float]
) -> None:
    script: dict[str, Any] = runpy.run_path(str(SCRIPT))
    clock = _Switching()
    script["_block"].__globals__["Stopwatch"] = functools.partial(
        Stopwatch, clock=lambda: clock.now
    )
    a, b = script["_time_apart"](
        clock.fn("fp32", *fp32), clock.fn("choice", *choice), 4, script["Blocks"](pause_s=0.0)
    )
    assert a == pytest.approx([fp32[1]] * 4) and b == pytest.approx([choice[1]] * 4)
    assert min(clock.calls.values()) >= 4 * (3 + 2)  # 3 untimed and 2 timed calls a block
