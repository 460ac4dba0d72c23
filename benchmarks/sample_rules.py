"""How the rule for one timed sample moves a speedup: fp32 and one candidate timed in one
process, alternating, by three rules, so that only the rule differs.

``HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/sample_rules.py builtin:minilm --batch 1``

- ``steady.py``: :func:`halfprec.bench.steady.steady_call_time`, the rule deploy and bench
  time with (wait for quiet, untimed calls for 5 ms, then at least 20 ms of calls), and
  the same with 0.1 s blocks (``steady.py 0.1 s``: does the block's length matter?);
- ``cold first call``: the same wait, then a call of 2 ms or more timed once, right after
  the switch from the other variant (shorter calls: 2 ms of them after one untimed call);
  the rule deploy used before, which under-claimed OpenVINO bf16 on MiniLM b1;
- ``long blocks``: ``benchmarks/verify_choice.py``'s rule (untimed calls for 50 ms and at
  least 3, then 0.3 s of calls).

Each prints both medians with their IQR and the per-round ratio fp32/candidate (median and
IQR). ``--clock cpu`` times by the process's CPU time instead of the wall clock: with
``--threads 1`` a loaded machine's scheduler then adds little, so the rules can be compared
under load (the caches are still shared with the other processes).
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from halfprec.batch import Batch, call, resize_batch
from halfprec.bench import steady
from halfprec.bench.variants import Variant, build_variant
from halfprec.convert.recipe import Recipe
from halfprec.io.specs import load_model
from halfprec.timing import Stopwatch

Rule = Callable[[Callable[[], object]], float]


Watch = Callable[[], Stopwatch]


def _calls(fn: Callable[[], object], calls: int, watch: Watch) -> float:
    """Seconds per call of ``calls`` back-to-back calls."""
    w = watch().start()
    for _ in range(calls):
        fn()
    return w.stop() / calls


def _cold_first_call(fn: Callable[[], object], watch: Watch) -> float:
    steady.settle()
    first = _calls(fn, 1, watch)
    if first >= 0.002:
        return first
    return _calls(fn, max(2, math.ceil(0.002 / max(first, 1e-9))), watch)


def _long_block(fn: Callable[[], object], watch: Watch) -> float:
    time.sleep(0.1)
    warm, last, calls = 0.0, 0.0, 0
    while calls < 3 or warm < 0.05:
        last = _calls(fn, 1, watch)
        warm, calls = warm + last, calls + 1
    return _calls(fn, max(2, math.ceil(0.3 / max(last, 1e-9))), watch)


def _model(spec: str, batch: int | None) -> tuple[torch.nn.Module, Batch]:
    if spec == "mlp":
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)
        )
        example: Batch = torch.randn(8, 64)
    else:
        loaded = load_model(spec)
        model, example = loaded.model, loaded.example_inputs[0]
    return model.eval(), example if batch is None else resize_batch(example, batch)


def _iqr(values: list[float], scale: float = 1.0) -> str:
    q1, median, q3 = statistics.quantiles([v * scale for v in values], n=4, method="inclusive")
    return f"{median:.3g} (IQR {q1:.3g}-{q3:.3g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="mlp, or a MODEL spec (builtin:minilm, ...)")
    parser.add_argument("--batch", type=int, default=None, help="rows per batch")
    parser.add_argument("--variant", default="openvino-bf16", help="the candidate")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of each rule")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="the clock")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    watch: Watch = (
        Stopwatch if args.clock == "wall" else functools.partial(Stopwatch, clock=time.process_time)
    )
    vars(steady)["Stopwatch"] = watch  # steady.py timed by the same clock
    model, batch = _model(args.model, args.batch)
    candidate = build_variant(model, Variant.parse(args.variant), Recipe.of("auto"), batch=batch)
    fns = (functools.partial(call, model, batch), functools.partial(call, candidate, batch))
    rules: dict[str, Rule] = {
        "steady.py": steady.steady_call_time,
        "steady.py 0.1 s": functools.partial(steady.steady_call_time, block_s=0.1),
        "cold first call": functools.partial(_cold_first_call, watch=watch),
        "long blocks": functools.partial(_long_block, watch=watch),
    }
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(
        f"{args.model} batch {args.batch}, {args.variant}, {torch.get_num_threads()} threads, "
        f"{args.clock} clock, load {load}",
        flush=True,
    )
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in rules}
    with torch.inference_mode():
        for _ in range(3):
            for fn in fns:
                fn()
        for r in range(args.rounds):
            for name, rule in rules.items():
                order = (0, 1) if r % 2 == 0 else (1, 0)
                for i in order:
                    times[name][i].append(rule(fns[i]))
    for name, (a, b) in times.items():
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        print(
            f"{name:16s} fp32 {_iqr(a, 1e3)} ms, {args.variant} {_iqr(b, 1e3)} ms, "
            f"fp32/candidate {_iqr(ratios)}"
        )
    print("load after", " ".join(Path("/proc/loadavg").read_text().split()[:3]))


if __name__ == "__main__":
    main()
