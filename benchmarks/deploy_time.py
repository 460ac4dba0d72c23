"""How long ``halfprec.deploy`` takes, in a fresh process per model, and where the time went.

``PYTHONPATH=src python3 benchmarks/deploy_time.py builtin:minilm builtin:bert-base``
runs ``deploy(model, example_batch)`` ("auto": every half dtype the device runs, eager
and compiled) once per model, each in a new Python process so that nothing of one run
(torch.compile's in-memory caches, the probe's process cache) helps the next, and prints
the process's wall time, split into the interpreter's start, the imports and model load,
``deploy`` (with reading its report) and the interpreter's exit after its output is
flushed (and the CPU time of the whole process), the load average around it,
with ``--budget S`` deploy's time budget (``deploy(budget_s=S)``, 0: none),
``Deployed.summary``, ``Deployed.time_spent``, ``Deployed.cpu_spent`` and what inductor's
FX graph and AOTAutograd caches did (``hit``: the compiled graph was loaded, not compiled).
``--cache DIR`` points both ``TORCHINDUCTOR_CACHE_DIR`` and ``HALFPREC_CACHE_DIR`` (the
probe's verdicts) at DIR, cleared first: ``--repeat 2`` then shows a first deploy on a
machine (cold caches) and a repeat one (warm); without it the user's caches are used as
they are.

``--cli`` runs the command line instead, ``python3 -m halfprec deploy MODEL -o
DIR/MODEL.safetensors --json`` (its budget counts from the process's start and keeps
``PROCESS_END_S`` for the write and exit: :mod:`halfprec.bench.budget`), and splits its
process into what its budget found spent when deploy started (the interpreter's start,
imports and model load), ``deploy`` and the rest (writing the choice, the report and the
interpreter's exit). A spec ``MODEL@N`` deploys on MODEL's example batch resized to N rows
(``builtin:minilm@1``), passed to the command as ``--inputs``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
from typing import Any

_CHILD = """
import json, sys, time
start = time.perf_counter()
import halfprec
from halfprec.io.specs import load_model
from halfprec.timing import now
m = load_model(sys.argv[1])
loaded = time.perf_counter()
budget = float(sys.argv[2]) if len(sys.argv) > 2 else None
kw = {} if budget is None else {"budget_s": budget or None}
d = halfprec.deploy(m.model, m.example_inputs[0], **kw)
from torch._dynamo.utils import counters
fx = {f"{k.removeprefix('fxgraph_cache_')} (FX graph)": v
      for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")}
fx.update({f"{k.removeprefix('autograd_cache_')} (AOTAutograd)": v
           for k, v in counters["aot_autograd"].items() if k.startswith("autograd_cache")})
print(json.dumps({"load_s": loaded - start, "wall_s": time.perf_counter() - start,
                  "summary": d.summary, "time_spent": d.time_spent, "cpu_spent": d.cpu_spent,
                  "fx_cache": fx, "exit_at": time.perf_counter()}), flush=True)
"""


def _children_cpu() -> float:
    """CPU seconds of the child processes that exited (with their own children)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _env(cache: str | None) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if cache is not None:
        env.update(TORCHINDUCTOR_CACHE_DIR=f"{cache}/inductor", HALFPREC_CACHE_DIR=cache)
    return env


def _inputs(spec: str, out: str) -> tuple[str, list[str]]:
    """``MODEL@N``: MODEL, and ``--inputs FILE`` holding its example batch resized to N
    rows (written beside ``out`` before the timed process starts); MODEL alone: itself."""
    model, _, rows = spec.partition("@")
    if not rows:
        return model, []
    from halfprec.batch import resize_batch
    from halfprec.io.inputs import save_inputs
    from halfprec.io.specs import load_model

    path = os.path.join(os.path.dirname(out), "inputs.safetensors")
    save_inputs([resize_batch(load_model(model).example_inputs[0], int(rows))], path)
    return model, ["--inputs", path]


def _one_cli(spec: str, cache: str | None, budget: float | None, out: str) -> dict[str, Any]:
    """``halfprec deploy SPEC -o OUT --json`` in a new process, timed whole (``SPEC@N``:
    on its example batch resized to N rows, given as ``--inputs``)."""
    from halfprec.timing import now

    model, inputs = _inputs(spec, out)
    args = [sys.executable, "-m", "halfprec", "deploy", model, "-o", out, "--json", *inputs]
    args += [] if budget is None else ["--budget", str(budget)]
    before = os.getloadavg()[0]
    start, cpu = now(), _children_cpu()
    proc = subprocess.run(args, env=_env(cache), capture_output=True, text=True)
    wall, cpu = now() - start, _children_cpu() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"{spec}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    data = json.loads(proc.stdout)
    report = data["report"]
    deploy_s = data["seconds"]["total"]
    return {
        "spec": spec,
        "process_s": wall,
        "process_cpu_s": cpu,
        "before_s": report["budget_spent_s"],
        "deploy_s": deploy_s,
        "after_s": max(0.0, wall - report["budget_spent_s"] - deploy_s),
        "budget_s": report["budget_s"],
        "reserve_s": report["budget_reserve_s"],
        "variant": data["variant"],
        "notes": [
            f"{r['variant']}: {r['note']}" for r in report["results"] if r["status"] == "skipped"
        ],
        "seconds": data["seconds"],
        "compile_s": data["compile_s"],
        "load_before": before,
        "load_after": os.getloadavg()[0],
    }


def _one(spec: str, cache: str | None, budget: float | None = None) -> dict[str, Any]:
    from halfprec.timing import now

    before = os.getloadavg()[0]
    start, cpu = now(), _children_cpu()
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, spec, *([] if budget is None else [str(budget)])],
        env=_env(cache),
        capture_output=True,
        text=True,
    )
    ended = now()
    wall, cpu = ended - start, _children_cpu() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"{spec}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    # perf_counter is one system-wide monotonic clock, so the child's stamp compares with ours
    exit_s = max(0.0, ended - data.pop("exit_at"))  # the interpreter's teardown, output flushed
    data.update(
        spec=spec,
        exit_s=exit_s,
        start_s=max(0.0, wall - data["wall_s"] - exit_s),  # the interpreter's own start
        process_s=wall,
        process_cpu_s=cpu,
        load_before=before,
        load_after=os.getloadavg()[0],
    )
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+")
    parser.add_argument("--cache", help="inductor and probe cache folder, cleared first")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each spec, in turn")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="deploy(budget_s=...) in seconds, 0 for no bound (default: deploy's own)",
    )
    parser.add_argument(
        "--cli", action="store_true", help="run `halfprec deploy MODEL -o ... --json` instead"
    )
    ns = parser.parse_args()
    if ns.cache:
        shutil.rmtree(ns.cache, ignore_errors=True)
    for run in range(ns.repeat):
        for spec in ns.specs:
            if ns.cli:
                _print_cli(_one_cli(spec, ns.cache, ns.budget, _out(spec)), run)
                continue
            r = _one(spec, ns.cache, ns.budget)
            fx = ", ".join(f"{k} {v}" for k, v in sorted(r["fx_cache"].items())) or "none"
            print(
                f"{spec} (run {run + 1}): process {r['process_s']:.1f} s, CPU "
                f"{r['process_cpu_s']:.1f} s (interpreter start {r['start_s']:.1f} s, "
                f"imports and model load {r['load_s']:.1f} s, deploy and its report "
                f"{r['wall_s'] - r['load_s']:.1f} s, exit {r['exit_s']:.1f} s), load average "
                f"{r['load_before']:.1f} -> {r['load_after']:.1f}; inductor caches: {fx}",
                flush=True,
            )
            print(f"  {r['summary']}")
            print(f"  {r['time_spent']}")
            print(f"  {r['cpu_spent']}", flush=True)


def _out(spec: str) -> str:
    """Where the command line writes the choice: a new temporary folder per run."""
    import tempfile

    name = spec.partition("@")[0].rsplit(":", 1)[-1].rsplit("/", 1)[-1] or "model"
    return os.path.join(tempfile.mkdtemp(prefix="deploy-time-"), f"{name}.safetensors")


def _print_cli(r: dict[str, Any], run: int) -> None:
    budget = "none" if r["budget_s"] is None else f"{r['budget_s']:g} s"
    print(
        f"{r['spec']} (run {run + 1}, halfprec deploy): process {r['process_s']:.1f} s, CPU "
        f"{r['process_cpu_s']:.1f} s (start, imports and model load {r['before_s']:.1f} s, "
        f"deploy {r['deploy_s']:.1f} s, write, report and exit {r['after_s']:.1f} s); budget "
        f"{budget} from the process's start, {r['reserve_s']:g} s kept; load average "
        f"{r['load_before']:.1f} -> {r['load_after']:.1f}",
        flush=True,
    )
    comp = "" if r["compile_s"] is None else f", compiled in {r['compile_s']:.1f} s"
    print(f"  chose {r['variant']}{comp}")
    phases = sorted(
        ((k, v) for k, v in r["seconds"].items() if k != "total"), key=lambda kv: -kv[1]
    )
    print("  deploy's seconds: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases), flush=True)
    for note in r["notes"]:
        print(f"  skipped: {note}", flush=True)


if __name__ == "__main__":
    main()
