"""Shared fixtures: running the CLI in a subprocess against this checkout's sources."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m halfprec ARGS`` from this checkout; returns the completed process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env["HF_HUB_OFFLINE"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return subprocess.run(
        [sys.executable, "-m", "halfprec", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def cli():  # type: ignore[no-untyped-def]
    return run_cli
