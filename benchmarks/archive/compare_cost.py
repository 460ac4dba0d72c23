"""Cost of the comparison itself: ``compare_outputs`` on one large output, and one
``ErrorStats.add_tensor`` call of the size diagnose makes for every module call.

    PYTHONPATH=src python benchmarks/archive/compare_cost.py [--baseline 692d26a] [--reps 5]

``--baseline REV`` also times compare.py and errorstats.py as they were at git revision REV
(read with ``git show``), interleaved with the current ones, and prints old / new. One
thread, best of ``--reps``, so that load from other processes matters less.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from halfprec.compare import compare_outputs
from halfprec.dtypes import range_of
from halfprec.errorstats import ErrorStats
from halfprec.timing import now


def _old_module(rev: str, path: str, name: str, folder: Path) -> ModuleType:
    source = subprocess.run(["git", "show", f"{rev}:{path}"], check=True, capture_output=True)
    file = folder / f"{name}.py"
    file.write_bytes(source.stdout)
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _best(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = now()
        fn()
        times.append(now() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default=None, help="git revision to compare against")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    out = torch.randn(32, 128, 768)
    half_out = (out + 1e-3 * torch.randn_like(out)).half()
    act = torch.randn(8, 128, 384)
    half_act = (act + 1e-3 * torch.randn_like(act)).half()
    limits = range_of(torch.float16)

    tiny, half_tiny = act * 1e-24, (act * 1e-24).half()  # underflows: float64 sums

    def new_stats() -> None:
        ErrorStats().add_tensor(act, half_act, limits)

    def new_tiny() -> None:
        ErrorStats().add_tensor(tiny, half_tiny, limits)

    cases: dict[str, list[Callable[[], Any]]] = {
        "compare_outputs, one 32x128x768 output": [lambda: compare_outputs([out], [half_out])],
        "ErrorStats, one 8x128x384 module output": [new_stats],
        "ErrorStats, the same output at 1e-24": [new_tiny],
    }
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline:
            folder = Path(tmp)
            old_cmp = _old_module(args.baseline, "src/halfprec/compare.py", "old_cmp", folder)
            old_es = _old_module(args.baseline, "src/halfprec/errorstats.py", "old_es", folder)
            cases["compare_outputs, one 32x128x768 output"].append(
                lambda: old_cmp.compare_outputs([out], [half_out])
            )

            def old_add(r: torch.Tensor, c: torch.Tensor) -> None:
                stats = old_es.ErrorStats()
                # add_tensor was _add_tensor at 692d26a
                (getattr(stats, "add_tensor", None) or stats._add_tensor)(r, c, limits)

            cases["ErrorStats, one 8x128x384 module output"].append(lambda: old_add(act, half_act))
            cases["ErrorStats, the same output at 1e-24"].append(lambda: old_add(tiny, half_tiny))
        for name, fns in cases.items():
            new = _best(fns[0], args.reps)
            line = f"{name:42s} now {new * 1e3:8.2f} ms"
            if len(fns) > 1:
                old = _best(fns[1], args.reps)
                line += f"   {args.baseline} {old * 1e3:8.2f} ms   old/new {old / new:5.2f}x"
            print(line)


if __name__ == "__main__":
    main()
