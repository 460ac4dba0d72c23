"""timing: interleaved rounds, and speed ratios with their spread (injected timings only)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halfprec.timing import Ratio, Timing, measure_interleaved, ratio_of


def test_rounds_call_every_function_once_in_turn_after_their_warmups() -> None:
    calls: list[str] = []
    a, b = measure_interleaved(
        [lambda: calls.append("a"), lambda: calls.append("b")], warmup=2, runs=3
    )
    assert calls == ["a", "a", "b", "b"] + ["a", "b"] * 3
    assert len(a.samples) == len(b.samples) == 3


def test_a_steady_2x_is_ranked_however_much_the_load_moves_both() -> None:
    # the machine's load changes 20x between rounds; within a round half is always 2x faster
    fp32 = Timing((2.0, 20.0, 4.0, 40.0, 6.0))
    half = Timing((1.0, 10.0, 2.0, 20.0, 3.0))
    speed = ratio_of(fp32, half)
    assert (speed.median, speed.q1, speed.q3, speed.rounds) == (2.0, 2.0, 2.0, 5)
    assert speed.ranked and speed.iqr == 0.0


def test_rounds_that_disagree_are_too_noisy_to_rank() -> None:
    # per-round ratios 0.5, 0.9, 1.1, 2.0, 3.0: the median says faster, the IQR straddles 1
    fp32 = Timing((1.0, 0.9, 1.1, 2.0, 3.0))
    half = Timing((2.0, 1.0, 1.0, 1.0, 1.0))
    speed = ratio_of(fp32, half)
    assert (speed.q1, speed.median, speed.q3) == (0.9, 1.1, 2.0)
    assert not speed.ranked
    assert speed.to_json() == {
        "median": 1.1,
        "q1": 0.9,
        "q3": 2.0,
        "iqr": 2.0 - 0.9,
        "rounds": 5,
        "ranked": False,
    }


def test_rounds_are_paired_not_pooled() -> None:
    # the same samples in another order: pooled medians agree, the per-round ratios do not
    fp32 = Timing((1.0, 3.0, 1.0, 3.0))
    paired = ratio_of(fp32, Timing((0.5, 1.5, 0.5, 1.5)))
    crossed = ratio_of(fp32, Timing((1.5, 0.5, 1.5, 0.5)))
    assert paired.ranked and paired.median == 2.0
    assert not crossed.ranked


def test_one_round_is_never_ranked() -> None:
    speed = ratio_of(Timing((4.0,)), Timing((1.0,)))
    assert speed.median == 4.0 and speed.rounds == 1 and not speed.ranked


def test_timings_of_other_rounds_are_refused() -> None:
    with pytest.raises(ValueError, match="same rounds, got 3 and 2 samples; measure them with"):
        ratio_of(Timing((1.0, 1.0, 1.0)), Timing((1.0, 1.0)))


def test_ratio_is_checked_on_construction() -> None:
    with pytest.raises(ValueError, match=r"Ratio\(rounds=0\): a ratio needs at least one"):
        Ratio(1.0, 1.0, 1.0, 0)
    with pytest.raises(ValueError, match="need q1 <= median <= q3"):
        Ratio(median=2.0, q1=2.5, q3=3.0, rounds=4)


times = st.floats(min_value=1e-4, max_value=10.0, allow_nan=False)


@given(st.lists(st.tuples(times, times), min_size=2, max_size=30))
def test_ranked_means_most_rounds_agree(rounds: list[tuple[float, float]]) -> None:
    speed = ratio_of(Timing(tuple(a for a, _ in rounds)), Timing(tuple(b for _, b in rounds)))
    ratios = [a / b for a, b in rounds]
    if speed.ranked:  # at least the middle half of the rounds is on the side it ranks
        side = [r > 1 for r in ratios] if speed.q1 > 1 else [r < 1 for r in ratios]
        assert sum(side) >= len(ratios) / 2
    assert speed.q1 <= speed.median <= speed.q3


class _Ticks:
    """A scripted wall clock: each reading is the next of ``times``."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def test_the_stopwatch_reads_its_clock_at_start_and_stop() -> None:
    from halfprec.timing import Stopwatch

    with Stopwatch("cpu", clock=_Ticks(10.0, 10.25)) as watch:
        pass
    assert watch.seconds == 0.25 and watch.device_seconds is None  # a CPU has no events
    again = Stopwatch(clock=_Ticks(1.0, 4.0, 5.0, 5.5))
    assert again.start().stop() == 3.0
    assert again.start().stop() == 0.5 and again.seconds == 0.5


def test_the_stopwatch_refuses_a_stop_without_a_start() -> None:
    from halfprec.timing import Stopwatch

    with pytest.raises(RuntimeError, match=r"stop\(\) before start\(\)"):
        Stopwatch().stop()


@pytest.mark.gpu
def test_the_stopwatch_waits_for_cuda_kernels_and_reads_its_events() -> None:
    import torch

    from halfprec.timing import Stopwatch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    x = torch.randn(4096, 4096, device="cuda")
    with Stopwatch("cuda") as watch:
        for _ in range(20):
            x = x @ x / 4096
    assert watch.device_seconds is not None and watch.device_seconds > 0
    assert watch.seconds is not None and watch.seconds >= 0.9 * watch.device_seconds
