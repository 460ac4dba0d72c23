"""examples/accelerate_bf16.py: MixedPrecision in an Accelerate loop vs plain Accelerate bf16."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two fresh interpreters (Accelerate's state is per process)

ROOT = Path(__file__).resolve().parents[2]


def _run(recipe: str) -> dict:  # type: ignore[type-arg]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    script = ROOT / "examples" / "accelerate_bf16.py"
    done = subprocess.run(
        [sys.executable, str(script), "--recipe", recipe, "--nan-step", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_accelerate_recipe_matches_plain_bf16_and_survives_a_nan_step() -> None:
    plain, halfprec = _run("plain"), _run("halfprec")
    assert halfprec["clean"]["losses"] == plain["clean"]["losses"]  # the same bf16 training
    assert halfprec["clean"]["skipped"] == []
    # the NaN step: plain Accelerate applies it and stays NaN; halfprec skips and goes on
    assert not plain["nan"]["finite"] and plain["nan"]["losses"][4:] == [None] * 4
    assert halfprec["nan"]["finite"] and halfprec["nan"]["skipped"] == [3]
    assert None not in halfprec["nan"]["losses"][4:]
    assert halfprec["nan"]["losses"][:3] == plain["nan"]["losses"][:3]
