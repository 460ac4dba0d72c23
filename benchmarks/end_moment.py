"""Does deploy's end moment measure what a user's loop sees? Both ways, in one process.

``PYTHONPATH=src python3 benchmarks/end_moment.py benchmarks/unseen_models.py:deit``
runs ``halfprec.deploy(model, batch)``, then times the caller's fp32 model and the choice
in the process deploy returns, in segments that alternate three ways of timing:

- ``deploy``: deploy's own steady sample (:func:`halfprec.bench.steady.steady_call_time`,
  what its end moment times: wait for quiet, then one call where it takes 0.1 s or more,
  else a block after warm-up calls), fp32 and the choice alternating their order;
- ``second``: deploy's wait for quiet and one untimed call, then the next call timed
  alone (does the first call after the wait differ?);
- ``loop``: verify_choice.py's blocks (a 0.1 s pause, 3 untimed calls, then 0.3 s of
  back-to-back calls), as a user's loop runs.

It prints, per way and variant, the median wall and CPU seconds (all threads) and minor
page faults per call, and each way's median fp32/choice ratio with its IQR, by wall and by
CPU time. Where the ways read the same ratio and the same faults, the end moment's
sampling and the process state it runs in match a user's loop; a difference between
deploy's claim and verify_choice.py then comes from when they were timed, not how.
``--threads 1`` removes a waiting thread's spin from the CPU time, which other processes'
load then sways far less.
"""

from __future__ import annotations

import argparse
import functools
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import halfprec
from halfprec.batch import call, resize_batch
from halfprec.bench.steady import settle, steady_call_time
from halfprec.timing import Stopwatch, now
from verify_choice import Blocks, _load, _model, _quartiles

Usage = tuple[float, float, int]  # wall s, CPU s, minor faults (per call)


def _used() -> tuple[float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt


def _deploy_way(fn: Callable[[], Any]) -> Usage:
    """deploy's steady sample, with its CPU and faults per call over all its calls (the
    untimed warm-up calls too)."""
    calls = [0]

    def counted() -> None:
        calls[0] += 1
        fn()

    cpu, faults = _used()
    wall = steady_call_time(counted)
    cpu2, faults2 = _used()
    return wall, (cpu2 - cpu) / calls[0], (faults2 - faults) // calls[0]


def _second_call_way(fn: Callable[[], Any]) -> Usage:
    """deploy's wait for quiet, one untimed call, then the next call timed alone: whether
    the first call after the wait is what differs from a loop."""
    settle()
    fn()
    cpu, faults = _used()
    with Stopwatch() as watch:
        fn()
    cpu2, faults2 = _used()
    return watch.seconds or 0.0, cpu2 - cpu, faults2 - faults


def _loop_way(fn: Callable[[], Any], how: Blocks) -> Usage:
    """verify_choice.py's block: pause, 3 untimed calls, then timed calls for block_s."""
    time.sleep(how.pause_s)
    for _ in range(3):
        fn()
    calls, start = 0, now()
    cpu, faults = _used()
    while calls < 2 or now() - start < how.block_s:
        fn()
        calls += 1
    wall = (now() - start) / calls
    cpu2, faults2 = _used()
    return wall, (cpu2 - cpu) / calls, (faults2 - faults) // calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="mlp, or a MODEL spec (builtin:minilm, ...)")
    parser.add_argument("--batch", type=int, default=None, help="rows per batch")
    parser.add_argument("--no-compile", action="store_true", help="deploy(compile=False)")
    parser.add_argument("--segments", type=int, default=4, help="segments of each way")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per segment")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(f"load average before: {_load()}", flush=True)
    model, batch = _model(args.model)
    if args.batch is not None:
        batch = resize_batch(batch, args.batch)
    done = halfprec.deploy(model, batch, compile=not args.no_compile)
    print(f"deploy: {done.summary}", flush=True)
    if done.variant == "fp32":
        print("deploy chose fp32: nothing to compare")
        return
    pair = {"fp32": functools.partial(call, model, batch)}
    pair[done.variant] = functools.partial(call, done.model, batch)
    ways: dict[str, Callable[[Callable[[], Any]], Usage]] = {
        "deploy": _deploy_way,
        "second": _second_call_way,
        "loop": functools.partial(_loop_way, how=Blocks()),
    }
    got: dict[tuple[str, str], list[Usage]] = {(w, v): [] for w in ways for v in pair}
    with torch.inference_mode():
        for segment in range(args.segments):
            for way, timed in ways.items():
                for r in range(args.rounds):
                    names = list(pair) if (segment + r) % 2 == 0 else list(pair)[::-1]
                    for name in names:
                        got[way, name].append(timed(pair[name]))
    for (way, name), rows in got.items():
        wall, cpu, faults = (statistics.median(row[i] for row in rows) for i in range(3))
        print(
            f"{way:6s} {name:26s} wall {wall * 1e3:9.2f} ms, CPU {cpu * 1e3:9.2f} ms, "
            f"{faults:7.0f} faults per call ({len(rows)} samples)"
        )
    for way in ways:
        for clock, i in (("wall", 0), ("CPU", 1)):
            rows = zip(got[way, "fp32"], got[way, done.variant], strict=True)
            q1, median, q3 = _quartiles([a[i] / b[i] for a, b in rows])
            print(f"ratio fp32/choice, {way} way, {clock}: {median:.2f}x (IQR {q1:.2f}-{q3:.2f})")
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
