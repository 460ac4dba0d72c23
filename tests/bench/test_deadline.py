"""Stopping a block that runs past its seconds (halfprec.bench.deadline): a spin stands in
for a compile; the caller's handler, timer and threads are left as they were."""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType

import pytest
import torch
from torch import nn

from halfprec.bench.deadline import Overrun, can_stop, deadline

pytestmark = pytest.mark.skipif(not can_stop(), reason="no SIGALRM timer on this thread")

MOST_S = 60.0  # a spin that is not stopped ends here, so that a failing test fails, not hangs


def _spin() -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < MOST_S:
        pass
    return time.perf_counter() - start


def test_a_block_past_its_seconds_is_stopped_and_the_handler_and_timer_restored() -> None:
    with pytest.raises(Overrun) as stop, deadline(0.05) as armed:
        assert armed
        # no process-wide alarm: the kernel could hand one to any thread (a runtime's or a
        # compiler's worker), so SIGALRM is sent to the main thread alone
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        _spin()
    assert 0.0 < stop.value.seconds < MOST_S
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with deadline(MOST_S) as armed:  # in time: runs through
        assert armed and sum(range(1000)) == 499500
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with pytest.raises(Overrun), deadline(0.0):  # no seconds left: nothing starts
        pytest.fail("the block ran with no seconds left")


def test_nothing_is_armed_over_the_caller_s_own_handler_or_off_the_main_thread() -> None:
    seen: list[int] = []

    def mine(signum: int, _frame: FrameType | None) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        with deadline(0.01) as armed:
            assert not armed
        assert signal.getsignal(signal.SIGALRM) is mine and seen == []
    finally:
        signal.signal(signal.SIGALRM, previous)
    off: list[bool] = []

    def worker() -> None:
        with deadline(0.01) as armed:
            off.append(armed)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert off == [False]
    with deadline(None) as armed:
        assert not armed


class _Stopped(nn.Module):  # a class of its own: dynamo's cache has never seen its forward
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * 2


def test_a_stopped_compile_leaves_the_process_able_to_compile_and_run() -> None:
    """torch.compile's first call stopped a millisecond in: the eager model still runs,
    and a later compile of it works."""
    model, x = _Stopped().eval(), torch.randn(2, 8)
    with pytest.raises(Overrun), deadline(1e-3):
        torch.compile(model)(x)
        _spin()  # a compile that beat the millisecond: the test still sees a stop
    expected = torch.relu(model.fc(x)) * 2
    assert torch.equal(model(x), expected)
    assert torch.equal(torch.compile(model, backend="eager")(x), expected)
