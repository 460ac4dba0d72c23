"""deploy's compile estimate against a measured cold compile, in a fresh process per model.

``PYTHONPATH=src:benchmarks HF_HUB_OFFLINE=1 python3 benchmarks/compile_estimate.py
builtin:minilm@1 builtin:bert-base@8 benchmarks/unseen_models.py:deit`` loads each MODEL
(``@N``: its example batch resized to N rows) in a new Python process with an empty
inductor cache, calls eager fp32 once (recording its distinct operations, its calls of
torch functions and of convolutions, as deploy's warm-up does, the count of distinct
operations by name (``kinds``), and that cold call's wall and CPU seconds),
reads the pace the way deploy's budget reads it
(:func:`halfprec.bench.budget.thread_pace`), and then compiles fp32
as deploy's candidate (``build_variant(model, Variant("fp32", compiled=True))``) and
times its first call: wall and CPU seconds. It prints the estimate
(:meth:`halfprec.bench.budget.Budget.estimate`) beside the measured compile, their ratio,
the CPU-seconds per call and per distinct operation, and the load average before and
after; ``--jsonl FILE`` appends every figure (the parameter count too), one line a model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

_CHILD = """
import json, math, sys, time
import torch
from halfprec.batch import call, resize_batch
from halfprec.bench.budget import Budget, thread_pace
from halfprec.bench.limit import GemmRecorder
from halfprec.bench.phases import cpu_seconds
from halfprec.bench.variants import Variant, build_variant
from halfprec.io.specs import load_model
spec, _, rows = sys.argv[1].partition("@")
m = load_model(spec)
model, batch = m.model.eval(), m.example_inputs[0]
if rows:
    batch = resize_batch(batch, int(rows))
start, cpu = time.perf_counter(), cpu_seconds()
with torch.inference_mode(), GemmRecorder() as rec:
    call(model, batch)
cold, cold_cpu = time.perf_counter() - start, cpu_seconds() - cpu
ops, calls = len(rec.ops), rec.calls
names = len({name for name, _ in rec.ops})
kinds = {}
for name, _ in rec.ops:
    kinds[name] = kinds.get(name, 0) + 1
numel = max((math.prod(s) for _, shapes in rec.ops for s in shapes), default=0)
at_once = thread_pace(idle_s=0.0)  # as read before round nineteen: right after the call
budget = Budget(None)
convolutions = rec.convolutions
est = budget.estimate(ops, calls, convolved=convolutions > 0)
pace = thread_pace()
params = sum(p.numel() for p in model.parameters())
compiled = build_variant(model, Variant("fp32", compiled=True), batch=batch)
start, cpu = time.perf_counter(), cpu_seconds()
with torch.inference_mode():
    call(compiled, batch)
wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
print(json.dumps({"ops": ops, "calls": calls, "names": names, "params": params,
                  "kinds": kinds, "numel": numel, "convolutions": convolutions,
                  "cold_s": cold, "cold_cpu_s": cold_cpu, "pace": pace,
                  "estimate_s": est.seconds, "how": est.how,
                  "pace_at_once": at_once, "compile_s": wall, "compile_cpu_s": cpu}), flush=True)
"""


def _one(spec: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TORCHINDUCTOR_CACHE_DIR=cache)
        before = os.getloadavg()[0]
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, spec], env=env, capture_output=True, text=True
        )
    if proc.returncode != 0:
        raise SystemExit(f"{spec}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    data.update(spec=spec, load_before=before, load_after=os.getloadavg()[0])
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", help="MODEL, or MODEL@N for a batch of N rows")
    parser.add_argument("--jsonl", help="append each model's figures to this file, one line each")
    ns = parser.parse_args()
    for spec in ns.specs:
        r = _one(spec)
        if ns.jsonl:
            with open(ns.jsonl, "a") as out:
                out.write(json.dumps(r) + "\n")
        print(
            f"{spec}: compile {r['compile_s']:.1f} s wall ({r['compile_cpu_s']:.1f} CPU-s, "
            f"{r['compile_cpu_s'] / max(r['calls'], 1):.3f} per call of {r['calls']}, "
            f"{r['compile_cpu_s'] / max(r['ops'], 1):.2f} per operation of {r['ops']}), estimated "
            f"{r['estimate_s']:.1f} s ({r['how']}; read at once after the call: pace "
            f"{r['pace_at_once']:.1f}): estimate / compile "
            f"{r['estimate_s'] / r['compile_s']:.2f}; load average {r['load_before']:.1f} -> "
            f"{r['load_after']:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
