"""How long ``halfprec.deploy`` takes, in a fresh process per model, and where the time went.

``PYTHONPATH=src python3 benchmarks/deploy_time.py builtin:minilm builtin:bert-base``
runs ``deploy(model, example_batch)`` ("auto": every half dtype the device runs, eager
and compiled) once per model, each in a new Python process so that nothing of one run
(torch.compile's in-memory caches, the probe's process cache) helps the next, and prints
the wall time from before the model is loaded to after ``deploy`` returns, the load
average around it, ``Deployed.summary`` and ``Deployed.time_spent``. ``--cold`` gives each
run a fresh inductor cache directory (what a first deploy on a machine pays); otherwise
the user's inductor cache is used as it is. ``--probe-cache DIR`` points
``HALFPREC_CACHE_DIR`` at DIR (run twice to see a probe cache hit).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

_CHILD = """
import json, sys, time
start = time.perf_counter()
import halfprec
from halfprec.io.specs import load_model
m = load_model(sys.argv[1])
loaded = time.perf_counter()
d = halfprec.deploy(m.model, m.example_inputs[0])
print(json.dumps({"load_s": loaded - start, "wall_s": time.perf_counter() - start,
                  "summary": d.summary, "time_spent": d.time_spent}))
"""


def _one(spec: str) -> dict[str, Any]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, spec], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{spec}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data.update(spec=spec, process_s=wall, load_before=before, load_after=os.getloadavg()[0])
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+")
    ns = parser.parse_args()
    for spec in ns.specs:
        r = _one(spec)
        print(
            f"{spec}: process {r['process_s']:.1f} s (model load {r['load_s']:.1f} s), "
            f"load average {r['load_before']:.1f} -> {r['load_after']:.1f}"
        )
        print(f"  {r['summary']}")
        print(f"  {r['time_spent']}")


if __name__ == "__main__":
    main()
