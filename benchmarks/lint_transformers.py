"""Lint every modeling file of the installed transformers: speed (files/min, median of 3
runs after a warm-up), counts per rule, and --fix applied to every file with fixes.

    PYTHONPATH=src python benchmarks/lint_transformers.py [--sample N] [--seed S]

``--sample N`` prints N random findings (seeded) for a hand check of false positives.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import transformers

from halfprec.leaks.lint import LintConfig, fix_source, lint_paths, lint_source


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sample", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    opts = parser.parse_args()

    root = Path(transformers.__file__).parent / "models"
    files = sorted(root.glob("**/modeling_*.py"))
    config = LintConfig()
    lint_paths(files[:50], config)  # warm-up: imports, regex compilation, file cache
    times = []
    for _ in range(opts.runs):
        start = time.perf_counter()
        report = lint_paths(files, config)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(f"transformers {transformers.__version__}: {len(files)} modeling files")
    print(
        f"lint: median {median:.2f} s over {opts.runs} runs -> {len(files) / median * 60:.0f} "
        f"files/min (runs: {', '.join(f'{t:.2f}' for t in times)})"
    )
    findings = report.findings
    with_findings = sum(1 for r in report.files if r.findings)
    print(f"findings: {len(findings)} in {with_findings} files; by rule: {report.counts()}")

    unsafe = LintConfig(unsafe_fixes=True)
    fixed_files = fixes = failures = 0
    start = time.perf_counter()
    for result in report.files:
        todo = [
            f
            for f in lint_source(Path(result.path).read_text(), result.path, unsafe)
            if f.fix is not None
        ]
        if not todo:
            continue
        source = Path(result.path).read_text()
        new = fix_source(source, unsafe)
        try:
            compile(new, result.path, "exec")
        except SyntaxError:
            failures += 1
            continue
        left = [f for f in lint_source(new, result.path, unsafe) if f.fix is not None]
        fixed_files += 1
        fixes += len(todo) - len(left)
    print(
        f"fix (safe + unsafe): {fixes} findings fixed in {fixed_files} files, "
        f"{failures} fixed files failed to compile, {time.perf_counter() - start:.1f} s"
    )

    if opts.sample:
        rng = random.Random(opts.seed)
        for f in rng.sample(findings, min(opts.sample, len(findings))):
            line = Path(f.path).read_text().splitlines()[f.line - 1].strip()
            print(f"{f.render().replace(str(root) + '/', '')}\n    | {line[:110]}")


if __name__ == "__main__":
    main()
