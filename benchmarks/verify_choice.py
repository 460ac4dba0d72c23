"""deploy's claimed speedup against an independent timing of the same two modules.

``HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/verify_choice.py mlp --batch 8 --no-compile``
runs ``halfprec.deploy(model, batch)`` and prints its choice and claimed ratio (median and
interquartile range of its rounds). Then, apart from deploy, it times the caller's fp32
model and the chosen module in alternating blocks (fp32 then the choice, then the choice
then fp32, ...): each block is its own steady phase, after a pause that lets every thread
of the process go idle, with a few untimed calls first, then back-to-back calls for
``--block-s`` seconds; a block's sample is its mean time per call. It prints both medians
with their interquartile ranges, the ratio of each pair of blocks (median and IQR), and
whether the two ratios agree: their interquartile ranges overlap.

MODEL: ``mlp`` (docs/bench.md's example, Linear(64,256)-GELU-Linear(256,64)), or any MODEL
of the command line (``builtin:minilm``, ``builtin:bert-base``, ``file.py:factory``, a
Hugging Face directory). ``--batch N`` resizes the example batch to N rows.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import halfprec
from halfprec.batch import Batch, batch_size_of, call, resize_batch
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


def _block(fn: Callable[[], Any], block_s: float, pause_s: float) -> float:
    """Seconds per call over one steady block of back-to-back calls."""
    time.sleep(pause_s)  # every thread of the process goes idle (and the other's spinning ends)
    for _ in range(3):
        fn()
    with Stopwatch() as one:
        fn()
    calls = max(3, math.ceil(block_s / max(one.seconds or 0.0, 1e-9)))
    with Stopwatch() as block:
        for _ in range(calls):
            fn()
    return (block.seconds or 0.0) / calls


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def _time_apart(
    fp32: Callable[[], Any], choice: Callable[[], Any], pairs: int, block_s: float, pause_s: float
) -> tuple[list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    with torch.inference_mode():
        for i in range(pairs):
            if i % 2 == 0:
                a.append(_block(fp32, block_s, pause_s))
                b.append(_block(choice, block_s, pause_s))
            else:
                b.append(_block(choice, block_s, pause_s))
                a.append(_block(fp32, block_s, pause_s))
    return a, b


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
    parser.add_argument("--pause-s", type=float, default=0.1, help="idle pause before a block")
    args = parser.parse_args()
    model, batch = _model(args.model)
    if args.batch is not None:
        batch = resize_batch(batch, args.batch)
    kwargs = {"compile": False} if args.no_compile else {}
    done = halfprec.deploy(model, batch, **kwargs)
    claimed = variant_speed(done.report, done.choice)
    print(
        f"model {args.model}, batch {batch_size_of(batch)}; torch threads {torch.get_num_threads()}"
    )
    print(f"deploy: {done.summary}")
    if claimed is None:
        print("deploy chose fp32: nothing to verify")
        return
    a, b = _time_apart(
        lambda: call(model, batch),
        lambda: call(done.model, batch),
        args.pairs,
        args.block_s,
        args.pause_s,
    )
    q1, median, q3 = _quartiles([x / y for x, y in zip(a, b, strict=True)])
    print(f"apart: fp32 {_us(a)}, {done.variant} {_us(b)} per call, {args.pairs} pairs of blocks")
    print(
        f"ratio fp32/choice: deploy {claimed.median:.2f}x (IQR {claimed.q1:.2f}-{claimed.q3:.2f}, "
        f"{claimed.rounds} rounds); apart {median:.2f}x (IQR {q1:.2f}-{q3:.2f})"
    )
    agree = q1 <= claimed.q3 and claimed.q1 <= q3
    print(
        "agree: the two interquartile ranges overlap"
        if agree
        else "DISAGREE: the ranges do not overlap"
    )


if __name__ == "__main__":
    main()
