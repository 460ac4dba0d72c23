"""Every timed sample of one real deploy, by moment (the race, deploy's end, a loop after).

``PYTHONPATH=src python3 benchmarks/race_trace.py benchmarks/unseen_models.py:whisper``
runs ``halfprec.deploy(model, batch)`` with its own default sampling
(:func:`halfprec.bench.steady.steady_call_time`, the wall clock), wrapped to record each
timed sample: its moment (``race``: the candidates' pairs; ``end``: the choice timed again
at deploy's end), its variant, its wall seconds, the process's CPU seconds and minor page
faults over the sample (its wait for quiet included), and the CPU seconds of every thread
of this process other than the calling one, and of its child processes (a compile worker),
from ``/proc`` (the timed module's own pool among them: with two threads, one of them busy
as long as the calling thread). After deploy it times fp32 and the choice in ``--pairs``
pairs of verify_choice.py's blocks (``loop``: wall seconds per call only).

It prints every sample (its moment, the candidate of its pair, its variant), then over the
choice's pair only, per variant and moment, the median wall and CPU per sample, and its
median fp32/choice ratio at each moment. Where the race's ratio differs from the end's and
the loop's, the medians say which side moved (fp32 or the choice), and by wall or CPU time
too: whether the race's samples did more work, or the same work more slowly, and whether
another thread or process ran beside them.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import resource
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import halfprec
from halfprec.batch import call, resize_batch
from halfprec.bench import deploy as deploy_module
from halfprec.bench import interleave
from halfprec.bench.steady import steady_call_time
from halfprec.bench.variants import Variant
from verify_choice import Blocks, _block, _load, _model

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(stat: str) -> float:
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _others(me: int) -> dict[str, float]:
    """CPU seconds so far of this process's threads other than ``me`` (by thread id) and of
    its child processes (by pid)."""
    seen: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        if task.name != str(me):
            try:
                seen[f"thread {task.name}"] = _cpu_of((task / "stat").read_text())
            except OSError:
                continue
    parent = str(os.getpid())
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text() if proc.name.isdigit() else ""
        except OSError:
            continue
        if stat and stat[stat.rindex(")") + 2 :].split()[1] == parent:
            seen[f"child {proc.name}"] = _cpu_of(stat)
    return seen


@dataclass
class Sample:
    moment: str
    pair: str
    variant: str
    wall: float
    cpu: float
    faults: int
    other_threads: float
    busy_threads: int
    children: float


@dataclass
class Trace:
    """The samples so far, and the moment now being timed."""

    moment: str = "race"
    pair: str = ""
    samples: list[Sample] = field(default_factory=list)

    def time(self, fn: Callable[[], object], variant: Variant) -> float:
        """deploy's default sample of ``fn`` (the wall clock), recorded."""
        me = threading.get_native_id()
        before, used = _others(me), resource.getrusage(resource.RUSAGE_SELF)
        seconds = steady_call_time(fn)
        after, now = _others(me), resource.getrusage(resource.RUSAGE_SELF)
        grew = {k: v - before.get(k, 0.0) for k, v in after.items()}
        self.samples.append(
            Sample(
                self.moment,
                self.pair,
                variant.name,
                seconds,
                now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime,
                now.ru_minflt - used.ru_minflt,
                sum(v for k, v in grew.items() if k.startswith("thread")),
                sum(1 for k, v in grew.items() if k.startswith("thread") and v > 0),
                sum(v for k, v in grew.items() if k.startswith("child")),
            )
        )
        return seconds


def _summary(trace: Trace, choice: str) -> None:
    """Medians per variant and moment, and the ratios, of the choice's pair only."""
    pairs = [s for s in trace.samples if s.pair == choice]
    for moment in ("race", "end", "loop"):
        for variant in ("fp32", choice):
            rows = [s for s in pairs if s.moment == moment and s.variant == variant]
            if rows:
                wall = statistics.median(s.wall for s in rows) * 1e3
                cpu = statistics.median(s.cpu for s in rows) * 1e3
                print(f"{moment:5s} {variant:24s} wall {wall:9.1f} ms, CPU {cpu:9.1f} ms")
    for moment in ("race", "end", "loop"):
        a = [s.wall for s in pairs if s.moment == moment and s.variant == "fp32"]
        b = [s.wall for s in pairs if s.moment == moment and s.variant == choice]
        if a and b:
            ratios = [x / y for x, y in zip(a, b, strict=False)]
            print(f"ratio fp32/choice, {moment}: {statistics.median(ratios):.2f}x {ratios}")


def _loop(trace: Trace, modules: dict[str, torch.nn.Module], batch: Any, pairs: int) -> None:
    """``pairs`` pairs of verify_choice.py's blocks of fp32 and the choice (the second of
    ``modules``), alternating their order, after deploy."""
    choice = list(modules)[1]
    with torch.inference_mode():
        for i in range(pairs):
            for name in list(modules) if i % 2 == 0 else list(modules)[::-1]:
                fn = functools.partial(call, modules[name], batch)
                wall = _block(fn, Blocks())  # per call; its CPU is not per call
                trace.samples.append(Sample("loop", choice, name, wall, math.nan, 0, 0.0, 0, 0.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="mlp, or a MODEL spec (builtin:bert-base, ...)")
    parser.add_argument("--batch", type=int, default=None, help="rows per batch")
    parser.add_argument("--pairs", type=int, default=4, help="pairs of loop blocks after deploy")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args()
    if args.threads is not None:  # one thread: a sample's CPU time is its work, whatever the load
        torch.set_num_threads(args.threads)
    print(f"load average before: {_load()}", flush=True)
    model, batch = _model(args.model)
    if args.batch is not None:
        batch = resize_batch(batch, args.batch)
    trace = Trace()
    again = deploy_module.time_again

    def end_moment(*a: Any, **k: Any) -> Any:
        trace.moment, trace.pair = "end", a[2].variant.name  # time_again(model, chosen, row, ...)
        return again(*a, **k)

    deploy_module.time_again = end_moment  # type: ignore[assignment]
    paired = interleave.Pairs.time

    def pair_of(pairs: interleave.Pairs, candidate: interleave.Prepared, *a: Any) -> None:
        trace.pair = candidate.result.variant.name
        paired(pairs, candidate, *a)

    interleave.Pairs.time = pair_of  # type: ignore[method-assign,assignment]
    done = halfprec.deploy(model, batch, timer=trace.time)
    print(f"deploy: {done.summary}\n{done.time_spent}")
    if done.variant != "fp32":
        _loop(trace, {"fp32": model, done.variant: done.model}, batch, args.pairs)
    for s in trace.samples:
        print(
            f"{s.moment:5s} {s.pair:24s} {s.variant:24s} {s.wall * 1e3:9.1f} ms"
            f"  CPU {s.cpu * 1e3:9.1f} ms"
            f"  faults {s.faults:6d}  other threads {s.other_threads:5.2f} s"
            f" ({s.busy_threads} busy)"
            f"  children {s.children:5.2f} s"
        )
    _summary(trace, done.variant)
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
