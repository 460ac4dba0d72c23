"""How fast ``halfprec lint`` starts and lints: start-up in seconds, throughput in files/s.

    PYTHONPATH=src python benchmarks/lint_speed.py DIR [DIR ...] [--runs 5] [--jobs N]
        [--baseline OTHER/src]

1. Start-up: ``python -m halfprec lint --help`` in a fresh interpreter, median of ``--runs``.
2. Throughput: every ``.py`` file under each DIR linted with the default rules (as
   ``halfprec lint DIR`` runs them, without printing), in a fresh interpreter per run; the
   median wall and CPU seconds of ``--runs`` (CPU: all processes, the workers too), and
   files per second of wall time. Without ``--jobs``, ``lint_paths`` picks (one process per
   CPU from ``MIN_PARALLEL_FILES`` files on, as ``halfprec lint`` does).
3. With ``--baseline``: the same, with ``halfprec`` imported from another checkout's
   ``src`` (e.g. main before a change; always its default jobs), interleaved run by run with this
   one, and the ratios of the medians (wall and CPU). Each run also hashes every finding
   (position, code, message and fix), so the line says whether both give the same findings.

Model libraries to lint (their wheels' source is enough; they need not import):

    pip download --no-deps --only-binary=:all: diffusers==0.42.1 timm==1.0.31 -d /tmp/w
    unzip -q /tmp/w/diffusers-*.whl -d /tmp/c/diffusers
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from halfprec.timing import now

SRC = Path(__file__).resolve().parents[1] / "src"


# one timed run in a fresh interpreter that imports no torch (as `halfprec lint` runs):
# argv is the folder and the jobs ("default": lint_paths' own choice); it prints files, wall
# and CPU seconds, a findings hash
CHILD = """
import hashlib, json, resource, sys, time
from halfprec.leaks.lint import LintConfig, lint_paths
root, jobs = sys.argv[1], sys.argv[2]
kwargs = {"jobs": int(jobs)} if jobs != "default" else {}
def workers():  # CPU seconds of the ended worker processes (--jobs)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
wall, cpu = time.perf_counter(), time.process_time() + workers()
report = lint_paths([root], LintConfig(), **kwargs)
wall, cpu = time.perf_counter() - wall, time.process_time() + workers() - cpu
digest = hashlib.sha256("\\n".join(map(repr, report.findings)).encode()).hexdigest()
print(json.dumps({"files": len(report.files), "wall": wall, "cpu": cpu, "hash": digest}))
"""


def _run(src: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, check=True
    )


def startup(src: Path) -> float:
    """Seconds from a fresh interpreter to ``halfprec lint --help`` printed."""
    start = now()
    _run(src, ["-m", "halfprec", "lint", "--help"])
    return now() - start


def throughput(src: Path, root: Path, jobs: int | None) -> dict[str, float | str]:
    out = _run(src, ["-c", CHILD, str(root), "default" if jobs is None else str(jobs)])
    return json.loads(out.stdout.strip().splitlines()[-1])


def load() -> str:
    """The 1, 5 and 15 minute load averages (``n/a`` where /proc has none)."""
    path = Path("/proc/loadavg")
    return " ".join(path.read_text().split()[:3]) if path.exists() else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dirs", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=None, help="this side's (default: its own)")
    parser.add_argument("--baseline", type=Path, help="another checkout's src to compare with")
    args = parser.parse_args()
    sides = {"this": SRC, **({"baseline": args.baseline} if args.baseline else {})}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load()}")
    ups: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(args.runs):
        for side, src in sides.items():
            ups[side].append(startup(src))
    print(", ".join(f"{s}: start-up {statistics.median(t):.3f} s" for s, t in ups.items()))
    for root in args.dirs:
        runs: dict[str, list[dict[str, float | str]]] = {side: [] for side in sides}
        for _ in range(args.runs):
            for side, src in sides.items():
                runs[side].append(throughput(src, root, args.jobs if side == "this" else None))
        print(report_line(root, runs))
    print(f"load at the end {load()}")


def report_line(root: Path, runs: dict[str, list[dict[str, float | str]]]) -> str:
    """``DIR (N files): this 1.52 s wall, 660 files/s, 1.50 s CPU; baseline ...``."""
    parts = []
    medians, cpus = {}, {}
    for side, results in runs.items():
        wall = statistics.median(float(r["wall"]) for r in results)
        cpu = statistics.median(float(r["cpu"]) for r in results)
        files = int(results[0]["files"])
        medians[side], cpus[side] = wall, cpu
        parts.append(f"{side} {wall:.2f} s wall, {files / wall:.0f} files/s, {cpu:.2f} s CPU")
    line = f"{root} ({int(runs['this'][0]['files'])} files): " + "; ".join(parts)
    if "baseline" in runs:
        hashes = {str(r["hash"]) for results in runs.values() for r in results}
        same = "yes" if len(hashes) == 1 else "NO"
        line += f"; baseline/this {medians['baseline'] / medians['this']:.2f}x wall"
        line += f", {cpus['baseline'] / cpus['this']:.2f}x CPU"
        line += f"; same findings: {same}"
    return line


if __name__ == "__main__":
    main()
