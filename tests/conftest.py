"""Shared fixtures (``cli`` runs the CLI in-process) and the settings every test runs under."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from support.cli import run_cli

# a run whose every test was skipped exits 1; a test that leaves process-wide state changed
# fails; a crashed xdist worker is named with the signal that ended it
pytest_plugins = ["support.skip_guard", "support.state_guard", "support.worker_exit"]

# no property test has a wall-clock deadline (hypothesis' default is 200 ms an example, and
# an example a loaded machine pauses past it fails the test, "Flaky"); speed is benchmarks'
settings.register_profile("halfprec", deadline=None)
settings.load_profile("halfprec")

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["HALFPREC_PROBE_CACHE"] = "0"  # tests never write the per-machine probe cache
if "PYTEST_XDIST_WORKER" in os.environ:
    # scripts/test.sh runs two pytest workers on 2 cores: one intra-op thread each, so the
    # workers do not oversubscribe the cores (subprocesses get OMP_NUM_THREADS=1 too)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


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
