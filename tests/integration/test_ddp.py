"""DDP and FSDP2 with AMP under torchrun (gloo, 2 CPU processes) against one process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from halfprec.train import MixedPrecision, load_checkpoint

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
sys.path.insert(0, str(HERE))
from ddp_job import POISON_STEP, RESUME_AT, STEPS, build, global_batch, train_step  # noqa: E402

pytestmark = pytest.mark.slow


def _torchrun(*args: str, pythonpath: Path, nproc: int = 2) -> str:
    """Run ``torchrun --standalone --nproc_per_node NPROC ARGS`` (gloo on CPU); return its log."""
    env = dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{pythonpath}", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
    proc = subprocess.Popen(
        [*cmd, str(nproc), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers
        log, _ = proc.communicate()
    text = log.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    return text


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ddp")
    _torchrun(str(HERE / "ddp_job.py"), str(out), pythonpath=HERE)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    return {"ranks": ranks, "weights": load_file(str(out / "weights.safetensors"))}


def _part(weights: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k.removeprefix(prefix): v for k, v in weights.items() if k.startswith(prefix)}


@pytest.fixture(scope="module")
def single() -> tuple[dict[str, torch.Tensor], list[str]]:
    """One process, the whole global batch, the inf in the loss at the same step."""
    model, optimizer = build()
    mp = MixedPrecision("fp16", "cpu")
    statuses = []
    for step in range(STEPS):
        x, y = global_batch(step)
        statuses.append(train_step(model, optimizer, mp, x, y, poison=step == POISON_STEP).status)
    return model.state_dict(), statuses


def test_ddp_matches_single_process_on_same_global_batch(run: dict[str, Any], single: Any) -> None:
    reference, statuses = single
    got = _part(run["weights"], "straight.")
    assert sorted(got) == sorted(reference)
    for name, value in reference.items():
        torch.testing.assert_close(got[name], value, rtol=1e-3, atol=3e-4)
    assert [o["status"] for o in run["ranks"][0]["ddp"]] == statuses


def test_inf_on_one_rank_skips_on_every_rank_and_backs_off_together(run: dict[str, Any]) -> None:
    for engine in ("ddp", "fsdp"):
        per_rank = [r[engine] for r in run["ranks"]]
        for outcomes in per_rank:
            assert [o["status"] for o in outcomes].count("skipped") == 1
            poisoned = outcomes[POISON_STEP]
            assert poisoned["status"] == "skipped" and poisoned["found_inf"]
            assert poisoned["scale_after"] == poisoned["scale_before"] / 2
        assert [o["scale_after"] for o in per_rank[0]] == [o["scale_after"] for o in per_rank[1]]
        assert [o["grad_norm"] for o in per_rank[0]] == [o["grad_norm"] for o in per_rank[1]]


def test_fsdp2_computes_in_fp16_and_tracks_single_process(run: dict[str, Any], single: Any) -> None:
    reference, _ = single
    assert {o["compute_dtype"] for o in run["ranks"][0]["fsdp"]} == {"torch.float16"}
    got = _part(run["weights"], "fsdp.")
    for name, value in reference.items():
        torch.testing.assert_close(got[name], value, rtol=1e-3, atol=3e-4)


def test_checkpoint_and_resume_under_ddp_is_exact(run: dict[str, Any]) -> None:
    straight, resumed = _part(run["weights"], "straight."), _part(run["weights"], "resumed.")
    assert [k for k in straight if not torch.equal(straight[k], resumed[k])] == []
    ddp = run["ranks"][0]["ddp"]
    assert run["ranks"][0]["resumed"] == ddp[RESUME_AT:]


def test_example_script_trains_and_checkpoints_under_torchrun(tmp_path: Path) -> None:
    script = str(HERE.parents[1] / "examples" / "train_distributed.py")
    ckpt = tmp_path / "digits.safetensors"
    log = _torchrun(
        script, "--dtype", "fp16", "--epochs", "1", "--checkpoint", str(ckpt), pythonpath=HERE
    )
    assert "ddp fp16 world=2" in log and "21 steps applied" in log
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters())
    mp = MixedPrecision("fp16", "cpu")
    assert load_checkpoint(ckpt, model, optimizer, mp=mp).counters == {"epoch": 1}
    assert mp.steps_applied == 21 and optimizer.state_dict()["state"]
