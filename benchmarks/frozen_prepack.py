"""What inductor's freezing and weight prepacking buy a CPU compile, and what they cost in caching.

``PYTHONPATH=src python3 benchmarks/frozen_prepack.py builtin:bert-base --recipes
not-frozen,prepacked --rounds 6`` compiles the model once per recipe, in the order given,
in one process:

- ``prepacked``: inductor *freezing* (the weights become constants) with
  ``cpp.weight_prepack`` on (torch's default: weights prepacked into oneDNN/MKL layouts,
  held as mkldnn tensors, which the FX graph cache cannot store);
- ``unpacked``: freezing with ``cpp.weight_prepack`` off (``mm``/``addmm`` on the folded
  weights);
- ``not-frozen``: ``torch.compile``'s default.

Each compiles under its own ``torch._inductor.config.patch`` and a fresh inductor cache
directory; the first (compiling) call and what the FX graph cache did (its own counters) are
printed. Then eager fp32 and the compiled modules are timed round-robin for ``--rounds``
rounds, so that load hits all alike, and each compiled module's speed over eager fp32 and
over the first recipe is printed as the median and interquartile range of the per-round
ratios (:func:`halfprec.timing.ratio_of`).

Each recipe compiles its own copy, of a class of its own: dynamo's guards do not look at
inductor settings, so a copy of the same class would silently reuse the graph compiled
for the recipe before. Give at most one frozen recipe per run: torch registers its
weight-prepacking patterns once per process, at the first frozen compile, with the
``cpp.weight_prepack`` of that moment, so a second frozen recipe in the same process would
compile like the first. Compile times in
one process are no cold/warm comparison either (later compiles reuse what earlier ones
built in memory); ``benchmarks/deploy_time.py`` measures those in fresh processes.
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
from typing import Any

import torch
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters

from halfprec.batch import call
from halfprec.io.specs import load_model
from halfprec.timing import measure_interleaved, now, ratio_of, spread_text

RECIPES: dict[str, dict[str, bool]] = {
    "prepacked": {"freezing": True, "cpp.weight_prepack": True},
    "unpacked": {"freezing": True, "cpp.weight_prepack": False},
    "not-frozen": {},
}


def _compiled(
    model: torch.nn.Module, batch: Any, options: dict[str, bool]
) -> tuple[Any, float, str]:
    """A compile of a copy of ``model`` under ``options`` (inductor settings), its first
    call's seconds and what the FX graph cache did."""
    mine = copy.deepcopy(model)
    # a class of its own: dynamo's guards do not see inductor settings, so a copy of the
    # same class would reuse the graph compiled for the recipe before
    mine.__class__ = type(f"{type(model).__name__}_{len(options)}", (type(model),), {})
    module = torch.compile(mine)
    before = dict(counters["inductor"])

    def run() -> Any:
        with inductor_config.patch(options), torch.no_grad():
            return call(module, batch)

    start = now()
    run()
    first = now() - start
    cache = {
        k.removeprefix("fxgraph_cache_"): v - before.get(k, 0)
        for k, v in counters["inductor"].items()
        if k.startswith("fxgraph_cache") and v != before.get(k, 0)
    }
    return run, first, ", ".join(f"{k} {v}" for k, v in sorted(cache.items())) or "no lookup"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="builtin:bert-base")
    parser.add_argument("--recipes", default="not-frozen,prepacked")
    parser.add_argument("--rounds", type=int, default=10)
    ns = parser.parse_args()
    names = ns.recipes.split(",")
    if sum(bool(RECIPES[n]) for n in names) > 1:
        parser.error("give at most one frozen recipe per run (see the module docs)")
    m = load_model(ns.spec)
    model, batch = m.model.eval(), m.example_inputs[0]
    print(f"{ns.spec}: torch {torch.__version__}, {torch.get_num_threads()} threads")
    fns = {}
    for name in names:
        options = RECIPES[name]
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
    for name, t in list(zip(fns, timings, strict=True))[1:]:
        print(f"  {name} against {names[0]}: {spread_text(ratio_of(timings[0], t))}")


if __name__ == "__main__":
    main()
