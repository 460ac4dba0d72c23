"""A benchmark's time budget: what deploy starts, bounded by the seconds it has left.

A cold ``deploy`` on a CPU spends most of its time compiling (torch.compile's first call:
dynamo's trace, inductor's lowering and a C++ build per kernel), and that cost follows the
model, not its size: on a 2-core Zen 3 (docs/benchmarks.md) compiling fp32 took about
40 CPU-seconds on BERT-base and GPT-2, and 115 on MobileViT-small, whose convolutions and
small products come in many shapes. A compile abandoned half-way is time lost, so the
budget decides before each candidate is built:

- a compiled candidate is compiled only where its estimated compile, its rounds and the
  end's re-timing fit in the seconds left. Before any compile the estimate is the
  CPU-seconds of eager fp32's first call's calls of torch functions at
  :data:`CALL_CPU_S` each (:data:`CONV_CALL_CPU_S` more where it convolves) and of its
  distinct operations (by name and operand shapes) at :data:`OP_CPU_S` each, summed and
  turned into wall seconds at this thread's
  pace now (:data:`WALL_PER_CPU` times the pace to the power :data:`PACE_POWER`;
  :func:`thread_pace`: this core's speed against the machine the constants were measured
  on, from a short pure-Python spin's CPU time, times the 1-minute load average per core;
  below 1 on a faster, idle core, above where other processes share the cores). Where the
  compile can be stopped, it starts once :data:`STOPPABLE_SHARE` of that estimate fits.
  Once one
  compile is measured, the next is estimated at that compile's own wall seconds (the
  same graph, compiled again in another dtype). A compile that runs past the seconds
  left less its rounds is stopped there (:mod:`halfprec.bench.deadline`, on the main
  thread of a POSIX process; elsewhere it runs to its end and the run ends past its
  budget by the difference): its row is skipped, with a note (:meth:`Budget.stopped`),
  nothing is claimed for it, and the candidates after it are not run;
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

``deploy()``'s budget is :data:`DEPLOY_BUDGET_S`, counted from its call; ``halfprec
deploy``'s is :data:`PROCESS_BUDGET_S` for the whole process: counted from the process's
start (:func:`process_start`: the interpreter's start, imports and the model's load are
charged), with its last :data:`PROCESS_END_S` kept for writing the choice and exiting
(``BenchConfig.budget_origin`` and ``budget_reserve_s``). ``halfprec bench``'s is
:data:`BENCH_BUDGET_S`, counted from the process's start as ``halfprec deploy``'s
(``--quick``: ``halfprec deploy``'s :data:`PROCESS_BUDGET_S`), with nothing kept.

The estimate is rough and aims at the compile's median, not past it: where the compile can
be stopped, one that reads low costs the seconds it ran, and one that reads high a gain
never tried. It reads a cached compile (a repeat deploy's) high, which skips it, and the
load average cannot foresee other processes' next minute (two cold MiniLM b1 compiles
at load 8 on a Zen 4 took 2.4 and 4.1 wall seconds per CPU-second).
The race's rounds and the claim's are not cut: the claim keeps what it measures.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from halfprec.bench.deadline import can_stop

if TYPE_CHECKING:  # imported by the command line's options, which start without torch
    from halfprec.bench.results import BenchConfig, VariantResult
    from halfprec.bench.variants import Variant

# deploy's own seconds: a cold deploy of BERT-base at batch 8 on 2 cores is meant to take at
# most 60 s as a whole process, of which imports, model load and exit take 7-10 s quiet
DEPLOY_BUDGET_S = 50.0

# ``halfprec deploy``'s seconds, for its whole process: from the interpreter's start
# (:func:`process_start`: imports and the model's load are charged) to its exit, of which
# PROCESS_END_S are kept for writing the choice and exiting. 5 s under the 60 s a cold
# ``halfprec deploy builtin:bert-base`` is meant to take on 2 cores: the margin for an
# estimate that runs low where a compile cannot be stopped (halfprec.bench.deadline)
PROCESS_BUDGET_S = 55.0

# what ``halfprec deploy`` keeps of its budget for writing the choice and the interpreter's
# exit: 2.0-3.8 s of exit after a cold deploy quiet, 4.5 s at load 8 (docs/benchmarks.md,
# rounds nineteen and twenty), and the write of a BERT-base checkpoint
PROCESS_END_S = 5.0

# where a command runs inside an older process (click's test runner), the time it started
# (``time.time()``): :func:`process_start` counts from it instead of the process's start
STARTED_AT_ENV = "HALFPREC_STARTED_AT"

# ``halfprec bench``'s seconds: bench times every variant (10 rounds each, deploy 3) and then
# measures memory, so more than deploy's; on a quiet 2-core Zen 4 ``bench builtin:bert-base
# --compile`` took 97-108 s, 21-24 s of it memory after every timing (docs/bench.md)
BENCH_BUDGET_S = 120.0

# iterations per CPU-second of thread_pace's spin where CALL_CPU_S was measured (the
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

# a cold torch.compile's CPU-seconds, estimated from eager fp32's first call: CALL_CPU_S per
# call of a torch function (what dynamo traces and inductor lowers, one graph node each),
# OP_CPU_S per distinct operation (name and operand shapes: the kernels inductor builds,
# one C++ build each), and CONV_CALL_CPU_S more per call in a model that convolves (a
# vision or audio front-end: its kernels run over long, odd-sized spatial or time axes).
# A non-negative least-squares fit to 17 cold fp32 compiles of seven models on the 2-core
# Zen 3 (docs/benchmarks.md, rounds nineteen to twenty-one: MiniLM, BERT-base, ViT-base,
# DeiT-small, BART, SegFormer-b0, Whisper-base's encoder); held out of it, DistilBERT and
# ConvNeXt-tiny read 0.74 and 0.78 of their compiles.
CALL_CPU_S = 0.085
OP_CPU_S = 0.21
CONV_CALL_CPU_S = 0.064

# a compile's wall seconds per CPU-second, ``WALL_PER_CPU * pace ** PACE_POWER`` at the
# thread's pace (:func:`thread_pace`): a quiet machine lends the compile's C++ builds the
# second core (BERT-base b8: 25.8 s of wall for 34.5 CPU-s at pace 1.3-1.6), a loaded one
# does not (BERT-base b8 at pace 8.0: 326.3 s for 51.2). A log-log fit to the wall over
# CPU of the same compiles read at pace 6 or less, where a compile can fit in a budget at
# all, and round eighteen's quiet MiniLM b1 one (19.5 s at pace 1.3, its CPU-seconds
# taken as 28); above pace 6 it reads high, where no compile fits either way. The
# spread is the pace's own (two readings seconds apart under load differ by a third).
WALL_PER_CPU = 0.54
PACE_POWER = 1.3

# where a compile can be stopped at the seconds left (:func:`~halfprec.bench.deadline.
# can_stop`), it starts when this share of its estimate and its rounds fit: an estimate
# that reads up to a third high (BERT-base b8 on a quiet Zen 3: 26 s, estimated at 43 s)
# no longer skips a compile that fits, and one that reads low is stopped at the seconds
# left: seconds spent, no overrun. Elsewhere the whole estimate must fit.
STOPPABLE_SHARE = 0.75


def _spin(cpu_s: float, most_s: float) -> tuple[float, float]:
    """One pure-Python spin's wall and CPU seconds per CPU-second of the reference machine."""
    start, cpu = time.perf_counter(), time.thread_time()
    n = 0
    while time.thread_time() - cpu < cpu_s and time.perf_counter() - start < most_s:
        n += 1
    per = REFERENCE_SPIN / max(n, 1)
    return (time.perf_counter() - start) * per, (time.thread_time() - cpu) * per


def load_per_core() -> float | None:
    """The 1-minute load average over the cores this process may run on (None where the
    system keeps none): how many runnable threads each core has had to share."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    return load / max(cores, 1)


def thread_pace(
    cpu_s: float = 0.03,
    most_s: float = 0.3,
    idle_s: float = IDLE_S,
    load: Callable[[], float | None] = load_per_core,
) -> float:
    """Wall seconds this thread takes for a CPU-second of the machine :data:`CALL_CPU_S`
    was measured on, over the next minute: this core's speed (the CPU seconds of 3
    pure-Python spins, each of ``cpu_s`` of its own CPU time or ``most_s`` of wall time,
    against :data:`REFERENCE_SPIN` iterations; a faster core reads below 1) times how
    many threads share a core (``load()``, the 1-minute load average per core, at least
    1). A compile runs for tens of seconds, and the load average holds the last minute:
    a spin's own wall time holds a few milliseconds, after a sleep that earns the
    scheduler's credit, and read the same compile's pace 0.8 at load 8 on a Zen 4 (it
    took 2.9 times its estimate) and 1.6 then 3.2 a minute apart on a quiet Zen 3. Where
    the system keeps no load average, the spins' wall time stands for it. Read after
    ``idle_s`` seconds asleep (the threads of the call just made park: :data:`IDLE_S`)."""
    time.sleep(idle_s)
    return pace_of([_spin(cpu_s, most_s) for _ in range(3)], load())


def pace_of(spins: Sequence[tuple[float, float]], shared: float | None) -> float:
    """:func:`thread_pace` from its spins' (wall, CPU) seconds per reference CPU-second and
    the threads per core (``shared``; None: unknown, the spins' wall time stands for it)."""
    if shared is None:
        return max(0.1, statistics.median(wall for wall, _ in spins))
    return max(0.1, statistics.median(cpu for _, cpu in spins) * max(1.0, shared))


@dataclass(frozen=True)
class CompileCost:
    """A compile's estimated wall seconds and how they were estimated (for the note)."""

    seconds: float
    how: str
    measured: bool = False  # another compile's measured seconds, not an estimate from counts


def process_start(clock: Callable[[], float] = time.perf_counter) -> float:
    """The reading of ``clock`` (a monotonic clock in seconds, ``time.perf_counter``'s
    base) at which this process started: now less the process's age from Linux's
    ``/proc/self/stat`` and ``/proc/uptime`` (10 ms ticks), so that the interpreter's start
    and every import before the caller count. Where :data:`STARTED_AT_ENV` holds a time
    (seconds since the epoch), that one: a command run inside an older process (click's
    test runner) started then. Elsewhere, now: nothing before the call is charged."""
    now = clock()
    given = os.environ.get(STARTED_AT_ENV)
    if given:
        try:
            return now - max(0.0, time.time() - float(given))
        except ValueError:
            pass
    try:
        stat = Path("/proc/self/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22: starttime
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return now - max(0.0, age)


@dataclass
class Budget:
    """``seconds`` of wall time (None: no bound), read on ``clock``, counted from
    ``origin`` (a reading of ``clock``; None: when the budget is made: deploy's call, or
    the run's start), of which the last ``reserve_s`` are kept for the caller's work after
    the run (``halfprec deploy``'s write and exit): no candidate starts that would reach
    into them. ``pace``: wall seconds per CPU-second of a thread now
    (:func:`thread_pace`; tests pass their own). ``compiled``: the compiles measured so
    far, by variant name."""

    seconds: float | None
    clock: Callable[[], float] = time.perf_counter
    pace: Callable[[], float] = thread_pace
    origin: float | None = None
    reserve_s: float = 0.0
    start: float = field(init=False)
    compiled: dict[str, float] = field(default_factory=dict)
    estimated: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.seconds is not None and not self.seconds > 0:
            raise ValueError(f"a time budget must be > 0 seconds (or None), got {self.seconds}")
        if not self.reserve_s >= 0:
            raise ValueError(f"a budget's reserve must be >= 0 seconds, got {self.reserve_s}")
        self.start = self.clock() if self.origin is None else self.origin

    @classmethod
    def of(cls, config: BenchConfig) -> Budget:
        """The budget a benchmark's options ask for (``budget_s``, ``budget_origin``,
        ``budget_reserve_s``), on the wall clock."""
        return cls(config.budget_s, origin=config.budget_origin, reserve_s=config.budget_reserve_s)

    @property
    def spent(self) -> float:
        return self.clock() - self.start

    @property
    def left(self) -> float:
        """The seconds candidates may still start in: the budget less what was spent and
        the reserve (infinite without a bound)."""
        if self.seconds is None:
            return float("inf")
        return self.seconds - self.reserve_s - self.spent

    @property
    def over(self) -> bool:
        """Whether the seconds are spent, the reserve aside (never without a bound)."""
        return self.left <= 0

    def spent_text(self, noun: str = "time budget") -> str:
        """``30 s of the 50 s time budget were spent`` (and the reserve, where one is kept)."""
        kept = f" ({self.reserve_s:g} s of it kept for after the run)" if self.reserve_s else ""
        return f"{self.spent:.0f} s of the {self.seconds:g} s {noun} were spent{kept}"

    def estimate(self, ops: int, calls: int | None = None, convolved: bool = False) -> CompileCost:
        """The next compile's wall seconds: the last measured compile's, or, before any, the
        CPU-seconds of eager fp32's call's ``calls`` calls of torch functions at
        :data:`CALL_CPU_S` each (:data:`CONV_CALL_CPU_S` more where the call
        ``convolved``) and of its ``ops`` distinct operations at :data:`OP_CPU_S` each
        (``calls`` unknown: one per operation), at :data:`WALL_PER_CPU` wall seconds per
        CPU-second at this thread's pace to the power :data:`PACE_POWER`."""
        if self.compiled:
            name, seconds = next(reversed(self.compiled.items()))
            return CompileCost(seconds, f"as {name}'s compile took", measured=True)
        calls = ops if calls is None else max(calls, ops)
        per_call = CALL_CPU_S + (CONV_CALL_CPU_S if convolved else 0.0)
        cpu = calls * per_call + ops * OP_CPU_S
        pace = self.pace()
        seconds = cpu * WALL_PER_CPU * pace**PACE_POWER
        convs = " (it convolves)" if convolved else ""
        how = (
            f"{calls} calls at {per_call:g} CPU-s each{convs} and {ops} distinct operations "
            f"at {OP_CPU_S:g}, {cpu:.0f} CPU-s at pace {pace:.1f}: {WALL_PER_CPU:g} x "
            f"pace^{PACE_POWER:g} wall seconds per CPU-second"
        )
        return CompileCost(seconds, how)

    def stopped(self, variant: Variant, ran_s: float) -> str:
        """The note of a compile stopped once the seconds left were spent (it ran ``ran_s``;
        kept as the next compile's least estimate)."""
        self.compiled[variant.name] = ran_s
        estimated = f" (estimated at {self.estimated:.0f} s)" if self.estimated else ""
        return (
            f"not compiled within the {self.seconds:g} s budget: its compile was stopped "
            f"after {ran_s:.0f} s{estimated}, when the seconds left{self._kept()} were "
            f"spent; {LIFT}"
        )

    def build_stopped(self, ran_s: float) -> str:
        """The note of a build (a runtime's conversion) stopped once the seconds left, less
        its rounds, were spent (it ran ``ran_s``)."""
        return (
            f"not run: its build was stopped after {ran_s:.0f} s, when the seconds left of "
            f"the {self.seconds:g} s budget{self._kept()} were spent; {LIFT}"
        )

    def record(self, variant: Variant, compile_s: float | None) -> None:
        """Keep a measured compile (the compiled variant's first call)."""
        if variant.compiled and compile_s is not None:
            self.compiled[variant.name] = compile_s

    def share(self, parts: int) -> float | None:
        """Half the seconds left, split in ``parts`` (at least 1 s each; None: no bound):
        what the GEMM limit may spend per half dtype (it stops after a round past it)."""
        if self.seconds is None or parts < 1:
            return None
        return max(1.0, self.left / (2 * parts))

    @staticmethod
    def rounds_s(call_s: float, rounds: int, end_s: float) -> float:
        """What a candidate costs past its build and compile, from eager fp32's call
        (``call_s``): a warm-up call and ``rounds`` rounds of a pair (the candidate's call
        taken as long as fp32's), and the end's re-timing of the claim (at least ``end_s``
        of timed calls, or 3 pairs)."""
        return 2 * call_s * (rounds + 1) + max(end_s, 2 * call_s * 3)

    def skip(
        self,
        variant: Variant,
        ops: int,
        rounds_s: Callable[[], float],
        calls: int | None = None,
        convolved: bool = False,
    ) -> str | None:
        """Why ``variant`` is not started within the budget; None to run it. ``rounds_s()``:
        the seconds its warm-up and rounds and the end's re-timing are expected to take
        (eager fp32's pairs; asked only where the compile alone fits: it may time a call);
        ``ops``, ``calls`` and ``convolved``: the distinct operations and the calls of eager
        fp32's call, and whether it convolved (:meth:`estimate`). A compiled variant starts
        only where its estimated compile (the share :meth:`share_started` of it) and its
        rounds fit in what is left (:attr:`left`)."""
        if self.seconds is None:
            return None
        cost = self.estimate(ops, calls, convolved) if variant.compiled else None
        self.estimated = None if cost is None else cost.seconds
        share = 1.0 if cost is None or cost.measured else self.share_started()
        least = 0.0 if cost is None else cost.seconds * share
        what = "" if cost is None else self._cost_text(cost, least)
        left = self.left
        if cost is not None and 0 < left <= least:  # once spent: "not run", below
            return f"{what}, with {left:.0f} s left{self._kept()}; {LIFT}"
        rounds = rounds_s()
        left = self.left
        if left <= rounds:
            return (
                f"not run: {self.spent_text('budget')}, and its rounds would take about "
                f"{rounds:.0f} s more; {LIFT}"
            )
        if cost is None or least + rounds <= left:
            return None
        return (
            f"{what} and its rounds at {rounds:.0f} s, with {left:.0f} s left{self._kept()}; {LIFT}"
        )

    def _cost_text(self, cost: CompileCost, least: float) -> str:
        at_least = f", at least {least:.0f} s" if least < cost.seconds else ""
        return (
            f"not compiled within the {self.seconds:g} s budget: its compile is estimated at "
            f"{cost.seconds:.0f} s ({cost.how}){at_least}"
        )

    @staticmethod
    def share_started() -> float:
        """The share of a compile's estimate from counts that must fit for it to start:
        :data:`STOPPABLE_SHARE` where it can be stopped at the seconds left (the main thread
        of a POSIX process: :func:`~halfprec.bench.deadline.can_stop`), else all of it."""
        return STOPPABLE_SHARE if can_stop() else 1.0

    def _kept(self) -> str:
        return f" ({self.reserve_s:g} s more kept for after the run)" if self.reserve_s else ""


def left_out(rows: Sequence[VariantResult]) -> str | None:
    """One line naming the rows a time budget skipped, with the first one's note (None
    where it skipped none): ``not run within the time budget: fp32+compile (not compiled
    within the 50 s budget: ...)``."""
    late = [r for r in rows if r.note.startswith(BUDGET_NOTES)]
    if not late:
        return None
    names = ", ".join(sorted({r.name for r in late}))
    return f"not run within the time budget: {names} ({late[0].note})"
