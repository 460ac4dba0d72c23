"""Shared fixtures: running the CLI in-process (fast) or, for smoke tests, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

SRC = Path(__file__).resolve().parents[1] / "src"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "PYTEST_XDIST_WORKER" in os.environ:
    # scripts/test.sh runs two pytest workers on 2 cores: one intra-op thread each, so the
    # workers do not oversubscribe the cores (subprocesses get OMP_NUM_THREADS=1 too)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run ``halfprec ARGS`` in this process through click's CliRunner.

    Returns what a subprocess would: exit code, stdout and stderr apart. An exception that
    escapes the command is rendered as the interpreter would (traceback on stderr, exit 1),
    so tests that forbid tracebacks still see them.
    """
    from halfprec.cli import main

    runner = CliRunner()
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = runner.invoke(main, list(args), prog_name="halfprec", catch_exceptions=True)
    finally:
        os.chdir(old)
    stderr = result.stderr
    code = result.exit_code
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        stderr += "".join(traceback.format_exception(exc))
        code = 1
    return subprocess.CompletedProcess(
        ["halfprec", *args], code, stdout=result.stdout, stderr=stderr
    )


def run_cli_subprocess(
    *args: str, cwd: Path | None = None, timeout: float = 600, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m halfprec ARGS`` from this checkout in a fresh interpreter (``stdin``:
    text typed at its standard input)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "halfprec", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def cli():  # type: ignore[no-untyped-def]
    return run_cli


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, for disk-full and read-only tests (root only; skipped elsewhere)."""
    where = tmp_path / "fs"
    where.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)]
    if subprocess.run(mount, capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
