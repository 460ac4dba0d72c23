"""A benchmark's time budget: what deploy starts, bounded by the seconds it has left.

A cold ``deploy`` on a CPU spends most of its time compiling (torch.compile's first call:
dynamo's trace, inductor's lowering and a C++ build per kernel), and that cost follows the
model, not its size: on a 2-core Zen 3 (docs/benchmarks.md) compiling fp32 took about
40 CPU-seconds on BERT-base and GPT-2, and 115 on MobileViT-small, whose convolutions and
small products come in many shapes. A compile once started runs to its end, so the
budget decides before each candidate is built:

- a compiled candidate is compiled only where its estimated compile, its rounds and the
  end's re-timing fit in the seconds left. Before any compile the estimate is the number
  of distinct operations (by name and operand shapes) in eager fp32's first call, times
  :data:`COMPILE_CPU_S` seconds each, times this thread's pace now to the power
  :data:`PACE_POWER` (:func:`thread_pace`: the wall seconds a short pure-Python spin takes
  for a CPU-second of the machine that constant was measured on, read once the call's
  threads are idle; below 1 on a faster core, above where other processes share the
  cores). Once one compile is measured, the next is estimated
  at that compile's own wall seconds (the same graph, compiled again in another dtype);
- a candidate's rounds are reckoned from eager fp32's call (the runner's: its fastest
  timed round, or one more call timed once, not its cold warm-up call);
- once the budget is spent, no further candidate is built (the choice and its claim come
  from what was measured), and eager fp32 is not timed alone (its rounds would rank
  nothing);
- the GEMM limit (:mod:`halfprec.bench.limit`) spends at most half the seconds left,
  shared among the half dtypes (it stops between products, at least the costliest timed);
- every candidate so skipped is a ``skipped`` row whose note says why and how long
  (:func:`left_out` names them all in one line, for deploy's summary and bench's
  footer), and ``budget_s=None`` (``halfprec deploy --budget 0``, ``halfprec bench
  --budget 0``) lifts the bound;
- bench's memory subprocesses are not started once the budget is spent.

deploy's budget is :data:`DEPLOY_BUDGET_S`, ``halfprec bench``'s :data:`BENCH_BUDGET_S`
(``--quick``: deploy's).

The estimate is rough: it can read a cached compile (a repeat deploy's) high, which skips
it, and a model whose kernels take unusually long to build low. The race's rounds and
the claim's are not cut: the claim keeps what it measures.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by the command line's options, which start without torch
    from halfprec.bench.results import VariantResult
    from halfprec.bench.variants import Variant

# deploy's own seconds: a cold deploy of BERT-base at batch 8 on 2 cores is meant to take at
# most 60 s as a whole process, of which imports, model load and exit take 7-10 s quiet
DEPLOY_BUDGET_S = 50.0

# ``halfprec bench``'s seconds: bench times every variant (10 rounds each, deploy 3) and then
# measures memory, so more than deploy's; on a quiet 2-core Zen 4 ``bench builtin:bert-base
# --compile`` took 97-108 s, 21-24 s of it memory after every timing (docs/bench.md)
BENCH_BUDGET_S = 120.0

# iterations per CPU-second of thread_pace's spin where COMPILE_CPU_S was measured (the
# 2-core Zen 3, under load 30: 670-750 thousand)
REFERENCE_SPIN = 700_000

# seconds thread_pace sleeps before it spins: the pace is read right after eager fp32's
# call, whose OpenMP worker threads spin on for a while before they sleep, and read there
# it came out high (BERT-base b8 on the quiet Zen 3 at the end of round eighteen: 2.6, where
# the other models' deploys read 1.3-1.6; at load 11-15, right after a call 4.3-5.6 and
# 50 ms later 3.4-5.5, docs/benchmarks.md, round nineteen)
IDLE_S = 0.05

# how the notes of the rows the budget skipped begin
BUDGET_NOTES = ("not run: ", "not compiled within the ")

# how a skipped row's note says the bound is lifted (deploy's and bench's alike)
LIFT = "budget_s=None (--budget 0) lifts it"

# wall seconds of a cold torch.compile per distinct operation (name and operand shapes) of
# the eager call at pace 1, and how the wall seconds grow with the pace: ``COMPILE_CPU_S *
# pace ** PACE_POWER``. Fitted to cold fp32 compiles on the 2-core Zen 3 (docs/benchmarks.md,
# round nineteen): quiet, MiniLM b1 19.5 s for 51 operations at pace 1.3 and BERT-base b8
# 25.8 s for 49 at 1.3-1.6; loaded, MiniLM b1 111.7 s at pace 4.3 (load 4-11) and BERT-base
# b8 326.3 s at 8.0 (load 14-20). Linear in the pace, one constant is 2-3 times too high
# quiet where it is right at load 15 (round eighteen's 0.85 was): a compile runs a C++
# build beside its Python on the second core, which a quiet machine lends it and a loaded
# one does not, and a 0.1 s spin after a sleep gets more of a shared core than a minutes-
# long compile does. 0.29 is the highest of the four fits, so that an estimate errs long.
COMPILE_CPU_S = 0.29
PACE_POWER = 1.5


def _spin(cpu_s: float, most_s: float) -> float:
    start, cpu = time.perf_counter(), time.thread_time()
    n = 0
    while time.thread_time() - cpu < cpu_s and time.perf_counter() - start < most_s:
        n += 1
    return (time.perf_counter() - start) * REFERENCE_SPIN / max(n, 1)


def thread_pace(cpu_s: float = 0.03, most_s: float = 0.3, idle_s: float = IDLE_S) -> float:
    """Wall seconds this thread now takes for a CPU-second of the machine
    :data:`COMPILE_CPU_S` was measured on: the median of 3 pure-Python spins, each until
    it has run ``cpu_s`` of its own CPU time (or ``most_s`` of wall time), their
    iterations against :data:`REFERENCE_SPIN`, read after ``idle_s`` seconds asleep (the
    threads of the call just made park: :data:`IDLE_S`). A compile runs mostly Python on
    one thread: a faster core reads below 1, other processes sharing the cores above."""
    time.sleep(idle_s)
    return max(0.1, statistics.median(_spin(cpu_s, most_s) for _ in range(3)))


@dataclass(frozen=True)
class CompileCost:
    """A compile's estimated wall seconds and how they were estimated (for the note)."""

    seconds: float
    how: str


@dataclass
class Budget:
    """``seconds`` of wall time from the benchmark's start (None: no bound), read on
    ``clock``; ``pace``: wall seconds per CPU-second of a thread now
    (:func:`thread_pace`; tests pass their own). ``compiled``: the compiles measured so
    far, by variant name."""

    seconds: float | None
    clock: Callable[[], float] = time.perf_counter
    pace: Callable[[], float] = thread_pace
    start: float = field(init=False)
    compiled: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.seconds is not None and not self.seconds > 0:
            raise ValueError(f"a time budget must be > 0 seconds (or None), got {self.seconds}")
        self.start = self.clock()

    @property
    def spent(self) -> float:
        return self.clock() - self.start

    @property
    def over(self) -> bool:
        """Whether the seconds are spent (never without a bound)."""
        return self.seconds is not None and self.spent >= self.seconds

    def estimate(self, ops: int) -> CompileCost:
        """The next compile's wall seconds: the last measured compile's, or ``ops`` distinct
        operations at :data:`COMPILE_CPU_S` seconds each at this thread's pace (to the power
        :data:`PACE_POWER`)."""
        if self.compiled:
            name, seconds = next(reversed(self.compiled.items()))
            return CompileCost(seconds, f"as {name}'s compile took")
        pace = self.pace()
        seconds = ops * COMPILE_CPU_S * pace**PACE_POWER
        how = (
            f"{ops} distinct operations at {COMPILE_CPU_S:g} s each, at pace {pace:.1f} "
            f"(seconds grow as the pace^{PACE_POWER:g})"
        )
        return CompileCost(seconds, how)

    def record(self, variant: Variant, compile_s: float | None) -> None:
        """Keep a measured compile (the compiled variant's first call)."""
        if variant.compiled and compile_s is not None:
            self.compiled[variant.name] = compile_s

    def share(self, parts: int) -> float | None:
        """Half the seconds left, split in ``parts`` (at least 1 s each; None: no bound):
        what the GEMM limit may spend per half dtype (it stops after a round past it)."""
        if self.seconds is None or parts < 1:
            return None
        return max(1.0, (self.seconds - self.spent) / (2 * parts))

    @staticmethod
    def rounds_s(call_s: float, rounds: int, end_s: float) -> float:
        """What a candidate costs past its build and compile, from eager fp32's call
        (``call_s``): a warm-up call and ``rounds`` rounds of a pair (the candidate's call
        taken as long as fp32's), and the end's re-timing of the claim (at least ``end_s``
        of timed calls, or 3 pairs)."""
        return 2 * call_s * (rounds + 1) + max(end_s, 2 * call_s * 3)

    def skip(self, variant: Variant, ops: int, rounds_s: Callable[[], float]) -> str | None:
        """Why ``variant`` is not started within the budget; None to run it. ``rounds_s()``:
        the seconds its warm-up and rounds and the end's re-timing are expected to take
        (eager fp32's pairs; asked only where the compile alone fits: it may time a call);
        ``ops``: the distinct operations of eager fp32's call."""
        if self.seconds is None:
            return None
        lift = LIFT
        cost = self.estimate(ops) if variant.compiled else None
        left = self.seconds - self.spent
        if cost is not None and 0 < left <= cost.seconds:  # once spent: "not run", below
            return (
                f"not compiled within the {self.seconds:g} s budget: its compile is estimated "
                f"at {cost.seconds:.0f} s ({cost.how}), with {left:.0f} s left; {lift}"
            )
        rounds = rounds_s()
        left = self.seconds - self.spent
        if left <= rounds:
            return (
                f"not run: {self.spent:.0f} s of the {self.seconds:g} s budget were spent, "
                f"and its rounds would take about {rounds:.0f} s more; {lift}"
            )
        if cost is None or cost.seconds + rounds <= left:
            return None
        return (
            f"not compiled within the {self.seconds:g} s budget: its compile is estimated at "
            f"{cost.seconds:.0f} s ({cost.how}) and its rounds at {rounds:.0f} s, with "
            f"{left:.0f} s left; {lift}"
        )


def left_out(rows: Sequence[VariantResult]) -> str | None:
    """One line naming the rows a time budget skipped, with the first one's note (None
    where it skipped none): ``not run within the time budget: fp32+compile (not compiled
    within the 50 s budget: ...)``."""
    late = [r for r in rows if r.note.startswith(BUDGET_NOTES)]
    if not late:
        return None
    names = ", ".join(sorted({r.name for r in late}))
    return f"not run within the time budget: {names} ({late[0].note})"
