"""Does deploy's claimed spread hold the ratio an independent re-timing reads a moment
later? fp32 and one candidate, built once, timed again and again in one process: each
trial times the pair as deploy does (:func:`halfprec.bench.interleave.time_interleaved`
with the race), by the race's old claim (5 rounds, ``claim_s=0``) and by its claim now
(5 rounds and ``claim_s`` seconds of timed calls), and as deploy did before its rounds
alternated their order (``fixed order``: 5 rounds, fp32's sample first in each, by
:func:`halfprec.bench.steady.steady_call_time`), each followed at once by
``benchmarks/verify_choice.py``'s re-timing (``--pairs`` pairs of alternating blocks,
default 12; fewer where a call takes a second).

``HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/claim_windows.py builtin:minilm --batch 32``

It prints each trial's claim (median and IQR, rounds) beside the re-timing, and how many
trials' ranges overlap by each claim. ``--clock cpu`` (the process's CPU time) with
``--threads 1`` resists the load of other processes on a shared machine (not their use of
the shared cache and memory, which comes and goes over seconds: the drift the claim's
span is for); on a quiet machine use the default wall clock and the default threads.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from halfprec.batch import call
from halfprec.bench import steady
from halfprec.bench.interleave import Prepared, time_interleaved
from halfprec.bench.race import Race
from halfprec.bench.results import VariantResult
from halfprec.bench.variants import Variant, build_variant
from halfprec.compare import compare_outputs
from halfprec.convert.recipe import Recipe
from halfprec.timing import Stopwatch

sys.path.insert(0, str(Path(__file__).parent))
import sample_rules  # noqa: E402  (a sibling script: its model loader)
import verify_choice  # noqa: E402  (a sibling script: its independent re-timing)

Range = tuple[float, float, float]


def _claim(
    fp32: torch.nn.Module, candidate: torch.nn.Module, variant: Variant, batch: object, race: Race
) -> tuple[Range, int, str]:
    """The candidate's paired ratio (q1, median, q3), its rounds and both medians, timed as
    deploy times it."""
    with torch.inference_mode():
        out_a, out_b = call(fp32, batch), call(candidate, batch)
    row = VariantResult(variant, 1, "ok")
    row.comparison = compare_outputs([out_a], [out_b], dtype=variant.dtype)
    pair = [
        Prepared(VariantResult(Variant("fp32"), 1, "ok"), fp32, 5),
        Prepared(row, candidate, 5),
    ]
    samples = time_interleaved(pair, batch, race, lambda fn, _v: steady.steady_call_time(fn))
    ratios = [a / b for a, b in zip(samples[0], samples[1], strict=False)]
    return verify_choice._quartiles(ratios), len(ratios), _medians(samples[0], samples[1])


def _fixed_order(
    fp32: torch.nn.Module, candidate: torch.nn.Module, batch: object, rounds: int = 5
) -> tuple[Range, int, str]:
    """The ratio (q1, median, q3) of ``rounds`` rounds timed fp32 first in every round."""
    a: list[float] = []
    b: list[float] = []
    with torch.inference_mode():
        for _ in range(rounds):
            a.append(steady.steady_call_time(functools.partial(call, fp32, batch)))
            b.append(steady.steady_call_time(functools.partial(call, candidate, batch)))
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return verify_choice._quartiles(ratios), rounds, _medians(a, b)


def _medians(a: list[float], b: list[float]) -> str:
    return f"{statistics.median(a) * 1e3:.2f}/{statistics.median(b) * 1e3:.2f} ms"


def _text(r: Range) -> str:
    return f"{r[1]:.3f}x (IQR {r[0]:.3f}-{r[2]:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="mlp, or a MODEL spec (builtin:minilm, ...)")
    parser.add_argument("--batch", type=int, default=None, help="rows per batch")
    parser.add_argument("--variant", default="openvino-bf16", help="the candidate")
    parser.add_argument("--trials", type=int, default=6, help="trials of each claim")
    parser.add_argument("--pairs", type=int, default=12, help="pairs of re-timed blocks")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="the clock")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":
        watch = functools.partial(Stopwatch, clock=time.process_time)
        vars(steady)["Stopwatch"] = watch
        vars(verify_choice)["Stopwatch"] = watch
    model, batch = sample_rules._model(args.model, args.batch)
    variant = Variant.parse(args.variant)
    candidate = build_variant(model, variant, Recipe.of("auto"), batch=batch)
    print(
        f"{args.model} batch {args.batch}, {args.variant}, {torch.get_num_threads()} threads, "
        f"{args.clock} clock, load {verify_choice._load()}",
        flush=True,
    )
    claims: dict[str, Callable[[], tuple[Range, int, str]]] = {
        "fixed order": functools.partial(_fixed_order, model, candidate, batch),
        "5 rounds": functools.partial(_claim, model, candidate, variant, batch, Race(claim_s=0)),
        f"{Race().claim_s:g} s": functools.partial(
            _claim, model, candidate, variant, batch, Race()
        ),
    }
    agree = dict.fromkeys(claims, 0)
    for trial in range(args.trials):
        for name, timed in claims.items():
            claim, rounds, ms = timed()
            a, b = verify_choice._time_apart(
                functools.partial(call, model, batch),
                functools.partial(call, candidate, batch),
                args.pairs,
                verify_choice.Blocks(),
            )
            apart = verify_choice._quartiles([x / y for x, y in zip(a, b, strict=True)])
            overlap = apart[0] <= claim[2] and claim[0] <= apart[2]
            agree[name] += overlap
            print(
                f"trial {trial} claim {name:11s} {_text(claim)} over {rounds:3d} rounds, {ms}; "
                f"apart {_text(apart)}, {_medians(a, b)}: {'agree' if overlap else 'DISAGREE'}; "
                f"load {verify_choice._load()}",
                flush=True,
            )
    for name, n in agree.items():
        print(f"claim by {name}: {n} of {args.trials} trials agree with the re-timing")


if __name__ == "__main__":
    main()
