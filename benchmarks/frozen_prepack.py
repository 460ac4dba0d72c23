"""What inductor's weight prepacking buys a frozen CPU compile, and what it costs in caching.

``PYTHONPATH=src python3 benchmarks/frozen_prepack.py builtin:bert-base --rounds 10``
compiles the model three times in one process: with inductor *freezing* (the weights become
constants) and ``cpp.weight_prepack`` on (torch's default: the weights are prepacked into
oneDNN/MKL blocked layouts, held as mkldnn tensors), with freezing and prepacking off (plain
``mm``/``addmm`` on the folded weights), and without freezing; each under its own
``torch._inductor.config.patch`` and a fresh inductor cache directory. It prints each first
(compiling) call (in one process the later compiles reuse what the earlier built in memory,
so these are no cold/warm comparison: ``benchmarks/deploy_time.py`` is) and whether
inductor's FX graph cache stored the graph (its own counters), then times eager fp32 and the
compiled modules round-robin for ``--rounds`` rounds, so that load hits all alike, and
prints each compiled module's speed over eager fp32 and over the prepacked one, as the
median and interquartile range of the per-round ratios (:func:`halfprec.timing.ratio_of`).
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from typing import Any

import torch
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters

from halfprec.batch import call
from halfprec.io.specs import load_model
from halfprec.timing import measure_interleaved, ratio_of, spread_text

PREPACKED = "frozen, prepack on"
RECIPES: dict[str, dict[str, bool]] = {
    PREPACKED: {"freezing": True, "cpp.weight_prepack": True},  # halfprec's CPU recipe before
    "frozen, prepack off": {"freezing": True, "cpp.weight_prepack": False},  # and now
    "not frozen": {},  # torch.compile's default
}


def _compiled(
    model: torch.nn.Module, batch: Any, options: dict[str, bool]
) -> tuple[Any, float, str]:
    """A compile of a copy of ``model`` under ``options`` (inductor settings), its first
    call's seconds and what the FX graph cache did."""
    module = torch.compile(copy.deepcopy(model))
    before = dict(counters["inductor"])

    def run() -> Any:
        with inductor_config.patch(options), torch.no_grad():
            return call(module, batch)

    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    cache = {
        k.removeprefix("fxgraph_cache_"): v - before.get(k, 0)
        for k, v in counters["inductor"].items()
        if k.startswith("fxgraph_cache") and v != before.get(k, 0)
    }
    return run, first, ", ".join(f"{k} {v}" for k, v in sorted(cache.items())) or "no lookup"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="builtin:bert-base")
    parser.add_argument("--rounds", type=int, default=10)
    ns = parser.parse_args()
    m = load_model(ns.spec)
    model, batch = m.model.eval(), m.example_inputs[0]
    print(f"{ns.spec}: torch {torch.__version__}, {torch.get_num_threads()} threads")
    fns = {}
    for name, options in RECIPES.items():
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="frozen_prepack_")
        run, first, cache = _compiled(model, batch, options)
        fns[name] = run
        print(f"  {name}: first call {first:.1f} s; FX graph cache: {cache}")

    def eager() -> Any:
        with torch.no_grad():
            return call(model, batch)

    load = os.getloadavg()[0]
    fp32, *timings = measure_interleaved([eager, *fns.values()], warmup=1, runs=ns.rounds)
    print(f"  {ns.rounds} interleaved rounds, load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"  eager fp32: median {fp32.median:.3f} s")
    for name, t in zip(fns, timings, strict=True):
        print(f"  {name}: median {t.median:.3f} s, {spread_text(ratio_of(fp32, t))} than fp32")
    on = timings[0]
    for name, t in list(zip(fns, timings, strict=True))[1:]:
        print(f"  {name} against {PREPACKED}: {spread_text(ratio_of(on, t))}")


if __name__ == "__main__":
    main()
