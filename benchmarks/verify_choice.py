"""deploy's claimed speedup against an independent timing of the same two modules.

``HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/verify_choice.py mlp --batch 8 --no-compile``
runs ``halfprec.deploy(model, batch)`` and prints its choice and claimed ratio (median and
range: the interquartile ranges of the choice's rounds in the race and at deploy's end
spanned, :mod:`halfprec.bench.claim`), and the race's rounds alone. Then, apart from deploy,
it times the caller's fp32 model and the chosen module in alternating blocks (fp32 then the
choice, then the choice then fp32, ...): each block is its own steady phase, as in a user's
loop, after a pause that lets every thread of the process go idle: untimed calls for
``--warm-s`` seconds (at least 3: the first calls after a switch are cold), then
back-to-back calls for ``--block-s`` seconds (at least 2); a block's sample is its mean time
per call. It prints both medians with their interquartile ranges, the ratio of each pair of
blocks (median and IQR), whether the claim agrees (its range and the blocks' interquartile
range overlap), and whether the race's rounds alone would have, and the load average before
and after.

It shares no timing code with deploy (no settle, no runner, no race), only the clock
(:class:`halfprec.timing.Stopwatch`, the wall clock with the device synchronised), and its
own rule differs from deploy's: a fixed pause instead of a wait for quiet, 15 times
longer blocks, at least 3 untimed calls, both orders of each pair. When one call takes T
seconds, more than ``--block-s``, the timing takes ``pairs * 2 * 5 * T`` (120 calls
at the default 12 pairs: 60 calls of each), after deploy.

On a loaded machine, ``--threads 1 --clock cpu`` times both deploy and the re-timing by
the process's CPU time with one thread (deploy's steady samples are switched to that clock
for the run), which other processes' load sways far less; figures for the docs come from
a quiet machine with the defaults.

MODEL: ``mlp`` (docs/bench.md's example, Linear(64,256)-GELU-Linear(256,64)), or any MODEL
of the command line (``builtin:minilm``, ``builtin:bert-base``, ``file.py:factory``, a
Hugging Face directory). ``--batch N`` resizes the example batch to N rows.
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import halfprec
from halfprec.batch import Batch, batch_size_of, call, resize_batch
from halfprec.bench import steady
from halfprec.bench.spread import variant_speed
from halfprec.io.specs import load_model
from halfprec.timing import Stopwatch


def _model(spec: str) -> tuple[torch.nn.Module, Batch]:
    if spec == "mlp":
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)
        )
        return model.eval(), torch.randn(8, 64)
    loaded = load_model(spec)
    return loaded.model.eval(), loaded.example_inputs[0]


@dataclass(frozen=True)
class Blocks:
    """How one block is timed: the idle pause before it, the untimed calls' least seconds
    (at least 3 calls), the timed calls' least seconds (at least 2 calls)."""

    pause_s: float = 0.1
    warm_s: float = 0.05
    block_s: float = 0.3


def _block(fn: Callable[[], Any], how: Blocks) -> float:
    """Seconds per call over one steady block of back-to-back calls."""
    time.sleep(how.pause_s)  # every thread of the process goes idle (the other's spinning ends)
    warm, last, calls = 0.0, 0.0, 0
    while calls < 3 or warm < how.warm_s:
        with Stopwatch() as one:
            fn()
        last = one.seconds or 0.0
        warm, calls = warm + last, calls + 1
    calls = max(2, math.ceil(how.block_s / max(last, 1e-9)))
    with Stopwatch() as block:
        for _ in range(calls):
            fn()
    return (block.seconds or 0.0) / calls


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def _time_apart(
    fp32: Callable[[], Any], choice: Callable[[], Any], pairs: int, how: Blocks
) -> tuple[list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    with torch.inference_mode():
        for i in range(pairs):
            if i % 2 == 0:
                a.append(_block(fp32, how))
                b.append(_block(choice, how))
            else:
                b.append(_block(choice, how))
                a.append(_block(fp32, how))
    return a, b


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _us(values: list[float]) -> str:
    q1, median, q3 = _quartiles(values)
    return f"{median * 1e6:.1f} us (IQR {q1 * 1e6:.1f}-{q3 * 1e6:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="mlp, or a MODEL spec (builtin:minilm, ...)")
    parser.add_argument(
        "--batch", type=int, default=None, help="rows per batch (default: the example's)"
    )
    parser.add_argument("--no-compile", action="store_true", help="deploy(compile=False)")
    parser.add_argument("--pairs", type=int, default=12, help="pairs of timed blocks")
    parser.add_argument("--block-s", type=float, default=0.3, help="seconds of calls per block")
    parser.add_argument("--warm-s", type=float, default=0.05, help="untimed seconds per block")
    parser.add_argument("--pause-s", type=float, default=0.1, help="idle pause before a block")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="the clock")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":  # this script's blocks and deploy's samples alike
        cpu_watch = functools.partial(Stopwatch, clock=time.process_time)
        vars(steady)["Stopwatch"] = cpu_watch
        globals()["Stopwatch"] = cpu_watch
    print(f"load average before: {_load()}", flush=True)
    model, batch = _model(args.model)
    if args.batch is not None:
        batch = resize_batch(batch, args.batch)
    kwargs = {"compile": False} if args.no_compile else {}
    done = halfprec.deploy(model, batch, **kwargs)
    race = variant_speed(done.report, done.choice)
    claimed = race if done.claim is None else done.claim.ratio
    print(
        f"model {args.model}, batch {batch_size_of(batch)}; torch threads "
        f"{torch.get_num_threads()}, {args.clock} clock"
    )
    print(f"deploy: {done.summary}")
    if done.claim is not None and done.claim.end is not None:
        which = "second call after the wait" if done.claim.second else "first call (long pair)"
        print(f"deploy's end timed each long call as the {which}")
    if claimed is None or race is None:
        print("deploy chose fp32: nothing to verify")
        return
    a, b = _time_apart(
        lambda: call(model, batch),
        lambda: call(done.model, batch),
        args.pairs,
        Blocks(args.pause_s, args.warm_s, args.block_s),
    )
    q1, median, q3 = _quartiles([x / y for x, y in zip(a, b, strict=True)])
    print(f"apart: fp32 {_us(a)}, {done.variant} {_us(b)} per call, {args.pairs} pairs of blocks")
    print(
        f"ratio fp32/choice: deploy {claimed.median:.2f}x (range {claimed.q1:.2f}-"
        f"{claimed.q3:.2f}, {claimed.rounds} rounds); apart {median:.2f}x (IQR {q1:.2f}-{q3:.2f})"
    )
    print(
        "agree: the claim's range and the blocks' IQR overlap"
        if q1 <= claimed.q3 and claimed.q1 <= q3
        else "DISAGREE: the ranges do not overlap"
    )
    alone = "overlap" if q1 <= race.q3 and race.q1 <= q3 else "do NOT overlap"
    print(
        f"the race's rounds alone: {race.median:.2f}x (IQR {race.q1:.2f}-{race.q3:.2f}, "
        f"{race.rounds} rounds): with the blocks' IQR they {alone}"
    )
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
