"""Does one variant's call slow (or speed) the next call of another? The call deploy times
as a long call's sample, the first after the wait for quiet, measured after the other
variant's call and after its own.

``HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/carryover.py builtin:gpt2``

fp32 and one candidate (default ``openvino-bf16``) are built once and called in a seeded
random order, so that each follows each about equally often. Each turn waits for quiet
(:func:`halfprec.bench.steady.settle`, as deploy does before a sample), times one call,
then a second right after it (back to back, as in a user's loop). It prints, for both
variants, the first call after the other variant's turn, the first after its own, and the
second call (median, IQR, count), and the fp32/candidate ratio of the medians by each. A
fixed order (fp32, then the candidate, round after round) timed fp32 only after the
candidate, and the candidate only after fp32: its claim is the "after the other" ratio.
It is meant for calls of 0.1 s or more, which deploy times one call a sample (a shorter
call's sample is a block after 5 ms of untimed calls; single calls of microseconds read
mostly the wake-up). ``--threads 1 --clock cpu`` resists a loaded machine (and hides
what the wall clock and the second thread add); figures for the docs come from a quiet
machine with the defaults.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from halfprec.batch import call
from halfprec.bench import steady
from halfprec.bench.variants import Variant, build_variant
from halfprec.convert.recipe import Recipe
from halfprec.timing import Stopwatch

sys.path.insert(0, str(Path(__file__).parent))
import sample_rules  # noqa: E402  (a sibling script: its model loader)

KINDS = ("after the other", "after itself", "second call")


def _turns(
    fns: dict[str, Callable[[], object]], rounds: int, watch: Callable[[], Stopwatch]
) -> dict[str, dict[str, list[float]]]:
    """Each variant's seconds per call, by kind (:data:`KINDS`), over ``rounds`` turns in a
    seeded random order."""
    times = {name: {kind: [] for kind in KINDS} for name in fns}
    order = random.Random(0)
    last = ""
    for _ in range(rounds):
        name = order.choice(sorted(fns))
        steady.settle()
        for kind in ("after itself" if name == last else "after the other", "second call"):
            one = watch().start()
            fns[name]()
            times[name][kind].append(one.stop())
        last = name
    return times


def _iqr_ms(values: list[float]) -> str:
    if len(values) < 2:
        return "n/a (fewer than 2)"
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{median * 1e3:.1f} ms (IQR {q1 * 1e3:.1f}-{q3 * 1e3:.1f}, {len(values)})"


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="mlp, or a MODEL spec (builtin:gpt2, ...)")
    parser.add_argument("--batch", type=int, default=None, help="rows per batch")
    parser.add_argument("--variant", default="openvino-bf16", help="the candidate")
    parser.add_argument("--rounds", type=int, default=40, help="turns, both variants together")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="the clock")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    watch: Callable[[], Stopwatch] = (
        Stopwatch if args.clock == "wall" else functools.partial(Stopwatch, clock=time.process_time)
    )
    model, batch = sample_rules._model(args.model, args.batch)
    candidate = build_variant(model, Variant.parse(args.variant), Recipe.of("auto"), batch=batch)
    fns = {
        "fp32": functools.partial(call, model, batch),
        args.variant: functools.partial(call, candidate, batch),
    }
    print(
        f"{args.model} batch {args.batch}, {args.variant}, {torch.get_num_threads()} threads, "
        f"{args.clock} clock, load {_load()}",
        flush=True,
    )
    with torch.inference_mode():
        for fn in fns.values():
            for _ in range(3):
                fn()
        times = _turns(fns, args.rounds, watch)
    for name, by_kind in times.items():
        for kind, values in by_kind.items():
            print(f"{name:16s} {kind:16s} {_iqr_ms(values)}")
    for kind in KINDS:
        a, b = times["fp32"][kind], times[args.variant][kind]
        ratio = statistics.median(a) / statistics.median(b) if a and b else float("nan")
        print(f"fp32/{args.variant} by medians, {kind}: {ratio:.2f}x")
    print(f"load after {_load()}")


if __name__ == "__main__":
    main()
