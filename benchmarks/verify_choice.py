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

A kept fp32 is a claim too: that no other candidate was faster. So it then builds the
runner-up afresh (the fastest other candidate deploy timed, by its median against fp32 in
its pair: fp32+compile where deploy kept fp32 on a CPU without fast half kernels; never
eager fp32, which is timed against the choice above), compiles it where it is compiled,
and times it against the choice in the same alternating blocks. It prints deploy's ranking
of the two (the runner-up's time over the choice's through fp32's in each one's pair, with
its range: "too noisy to rank" where that range holds 1) beside the blocks' ratio and IQR,
and whether they agree: ``RANKING WRONG`` where the blocks find the runner-up faster beyond
their spread, by more than deploy's least claimed gain (5%), and deploy did not, or the
reverse; whether the ranges overlap. Where deploy
said "too noisy to rank", it says whether the blocks could rank them. ``--no-runner-up``
skips it.

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
``--runtimes none`` tries no runtime target, as ``halfprec deploy -o NAME.safetensors``
does (``--runtimes openvino``: those named).
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
from halfprec.bench.claim import MIN_GAIN
from halfprec.bench.deploy import Deployed
from halfprec.bench.results import BenchResult, VariantResult, paired_speed, relative_time
from halfprec.bench.spread import variant_speed
from halfprec.bench.variants import Variant, build_variant
from halfprec.bench.ways import choice_kinds
from halfprec.io.specs import load_model
from halfprec.timing import Ratio, Stopwatch, now


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


def runner_up(report: BenchResult, choice: VariantResult) -> VariantResult | None:
    """The fastest candidate deploy timed other than its choice and eager fp32 (by its
    median time relative to fp32's in its pair), accurate and of a kind deploy may pick;
    eager fp32 itself where the choice is another (it is re-timed against the choice
    anyway). None where there is no such candidate."""
    fp32 = report.get("fp32", choice.batch_size)
    rows = [
        r
        for r in report.at(choice.batch_size)
        if r.name not in (choice.name, fp32.name)
        and r.status == "ok"
        and r.accurate
        and (r.variant.kind in choice_kinds() or r.variant.runtime)
        and relative_time(fp32, r) is not None
    ]
    return min(rows, key=lambda r: relative_time(fp32, r) or math.inf, default=None)


@dataclass(frozen=True)
class Ranking:
    """deploy's ranking of its choice against the runner-up, from the race's rounds:
    ``ratio`` is the runner-up's time over the choice's (above 1: the choice is faster),
    through fp32's time in the same round of each one's pair."""

    choice: str
    runner_up: str
    ratio: Ratio

    @property
    def verdict(self) -> str:
        """``choice`` or ``runner-up`` (faster beyond the spread, by more than deploy's
        least claimed gain: :data:`~halfprec.bench.claim.MIN_GAIN`), or ``too noisy``."""
        return _verdict(self.ratio, MIN_GAIN)

    @property
    def text(self) -> str:
        if self.verdict == "too noisy":
            return f"too noisy to rank {self.runner_up} against {self.choice}"
        faster = self.choice if self.verdict == "choice" else self.runner_up
        return f"{faster} faster beyond the race's spread"

    def against(self, apart: Ratio) -> str:
        """Whether the blocks timed apart (``apart``: the same ratio) agree with the
        ranking: the ranges overlap, and neither ranks the other way beyond its spread by
        more than deploy's least claimed gain (:data:`~halfprec.bench.claim.MIN_GAIN`)."""
        mine, theirs = self.verdict, _verdict(apart, MIN_GAIN)  # the floor deploy ranks by
        overlap = apart.q1 <= self.ratio.q3 and self.ratio.q1 <= apart.q3
        spreads = "overlap" if overlap else "do NOT overlap"
        if theirs == "runner-up" and mine != "runner-up":
            head = f"RANKING WRONG: apart, {self.runner_up} is faster beyond the blocks' spread"
        elif mine == "runner-up" and theirs != "runner-up":
            head = f"RANKING WRONG: apart, {self.runner_up} is not faster beyond the spread"
        elif mine == theirs and mine == "too noisy" and _verdict(apart) != "too noisy":
            faster = self.choice if _verdict(apart) == "choice" else self.runner_up
            head = f"ranking agrees: apart, {faster} is faster by less than {MIN_GAIN:.0%}"
        elif mine == theirs:
            head = "ranking agrees" + (": apart too close to rank" if mine == "too noisy" else "")
        elif mine == "too noisy":
            head = f"ranking agrees; apart the blocks rank {self.choice} faster (deploy: too noisy)"
        else:
            head = "ranking agrees in order; apart the blocks are too close to rank"
        return f"{head}; the ranges {spreads}"


def _verdict(r: Ratio, least: float = 0.0) -> str:
    if r.rounds > 1 and r.q1 > 1.0 + least:
        return "choice"
    if r.rounds > 1 and r.q3 < 1.0 / (1.0 + least):
        return "runner-up"
    return "too noisy"


def ranking(report: BenchResult, choice: VariantResult, second: VariantResult) -> Ranking:
    """deploy's :class:`Ranking` of ``choice`` against ``second`` (the race's rounds)."""
    if choice.variant == Variant("fp32"):
        r = paired_speed(choice, second)  # second's speed over fp32: inverted below
        if r is None:
            raise ValueError(f"{second.name} was not timed against fp32")
        ratio = Ratio(1 / r.median, 1 / r.q3, 1 / r.q1, r.rounds)
    else:
        theirs = paired_speed(second, choice)
        if theirs is None:
            raise ValueError(f"{second.name} or {choice.name} was not timed")
        ratio = theirs
    return Ranking(choice.name, second.name, ratio)


def _ratio_text(r: Ratio) -> str:
    return f"{r.median:.2f}x (range {r.q1:.2f}-{r.q3:.2f}, {r.rounds} rounds)"


def _verify_claim(
    done: Deployed, batch: Batch, fp32: Callable[[], Any], pairs: int, how: Blocks
) -> None:
    """The choice against the caller's fp32 model, apart, beside deploy's claim."""
    race = variant_speed(done.report, done.choice)
    if race is None:
        print("deploy chose fp32: no speedup claimed over it")
        return
    claimed = race if done.claim is None else done.claim.ratio
    a, b = _time_apart(fp32, lambda: call(done.model, batch), pairs, how)
    q1, median, q3 = _quartiles([x / y for x, y in zip(a, b, strict=True)])
    print(f"apart: fp32 {_us(a)}, {done.variant} {_us(b)} per call, {pairs} pairs of blocks")
    print(
        f"ratio fp32/choice: deploy {_ratio_text(claimed)}; apart {median:.2f}x "
        f"(IQR {q1:.2f}-{q3:.2f})"
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


def _verify_runner_up(
    done: Deployed, model: torch.nn.Module, batch: Batch, pairs: int, how: Blocks
) -> None:
    """The runner-up (the fastest other candidate deploy timed: :func:`runner_up`) built
    afresh and timed against the choice, apart, beside deploy's ranking of the two."""
    second = runner_up(done.report, done.choice)
    if second is None:
        print("runner-up: none besides eager fp32 (deploy timed no other accurate candidate)")
        return
    said = ranking(done.report, done.choice, second)
    print(f"runner-up: {second.name}; deploy: {said.text}")
    built = build_variant(model, second.variant, halfprec.Recipe.of("auto"), batch=batch)
    if second.variant.compiled:
        start = now()
        with torch.inference_mode():  # as deploy warmed it
            call(built, batch)
        print(f"runner-up compiled in {now() - start:.1f} s (wall)")
    b, c = _time_apart(lambda: call(done.model, batch), lambda: call(built, batch), pairs, how)
    q1, median, q3 = _quartiles([y / x for x, y in zip(b, c, strict=True)])
    apart = Ratio(median, q1, q3, pairs)
    print(
        f"apart: {done.variant} {_us(b)}, {second.name} {_us(c)} per call, {pairs} pairs of blocks"
    )
    print(
        f"ratio {second.name}/{done.variant} (above 1: the choice is faster): deploy "
        f"{_ratio_text(said.ratio)}; apart {median:.2f}x (IQR {q1:.2f}-{q3:.2f})"
    )
    print(said.against(apart))


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
    parser.add_argument("--no-runner-up", action="store_true", help="do not re-time the runner-up")
    parser.add_argument(
        "--budget", type=float, default=None, help="deploy(budget_s=...), 0 for no bound"
    )
    parser.add_argument(
        "--runtimes",
        default=None,
        help="deploy(runtimes=...): none, or names such as openvino (default: deploy's own; "
        "none tries what `halfprec deploy -o NAME.safetensors` tries)",
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":  # this script's blocks and deploy's samples alike
        cpu_watch = functools.partial(Stopwatch, clock=time.process_time)
        vars(steady)["Stopwatch"] = cpu_watch
        globals()["Stopwatch"] = cpu_watch
    print(f"load average before: {_load()} at {time.strftime('%H:%M:%S', time.gmtime())} UTC")
    model, batch = _model(args.model)
    if args.batch is not None:
        batch = resize_batch(batch, args.batch)
    kwargs: dict[str, Any] = {"compile": False} if args.no_compile else {}
    if args.budget is not None:
        kwargs["budget_s"] = args.budget or None
    if args.runtimes is not None:
        names = [n for n in args.runtimes.split(",") if n and n != "none"]
        kwargs["runtimes"] = tuple(names)
    done = halfprec.deploy(model, batch, **kwargs)
    print(
        f"model {args.model}, batch {batch_size_of(batch)}; torch threads "
        f"{torch.get_num_threads()}, {args.clock} clock"
    )
    print(f"deploy: {done.summary}")
    claim = done.claim
    if claim is not None and claim.end is not None:
        which = "second call after the wait" if claim.second else "first call (long pair)"
        print(f"deploy's end timed each long call as the {which}")
    how = Blocks(args.pause_s, args.warm_s, args.block_s)
    _verify_claim(done, batch, lambda: call(model, batch), args.pairs, how)
    if not args.no_runner_up:
        _verify_runner_up(done, model, batch, args.pairs, how)
    print(f"load average after: {_load()} at {time.strftime('%H:%M:%S', time.gmtime())} UTC")


if __name__ == "__main__":
    main()
