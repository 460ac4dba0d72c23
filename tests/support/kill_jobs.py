"""Fork server for the kill -9 test: imports halfprec once, forks writers, SIGKILLs them.

Usage: python kill_jobs.py FOLDER SEED. Each writer loops forever: ``halfprec convert``
(through the CLI's ``main``, as ``python -m halfprec`` runs it) or ``save_checkpoint``.
Kills alternate between a random moment and a moment while a temp file exists (mid-write).
Prints one JSON line: the kills made and how many of them hit a write in progress.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import torch
from torch import nn

from halfprec.cli import main
from halfprec.train import save_checkpoint

KILLS = 5


def big() -> nn.Module:
    """A model whose checkpoint takes a while to write (4M parameters)."""
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Linear(1024, 1024) for _ in range(4)))


def example_inputs() -> list[torch.Tensor]:
    return [torch.randn(2, 1024)]


def _convert_forever(folder: Path) -> None:
    for i in range(10**9):
        dtype = ("fp16", "bf16")[i % 2]
        out = str(folder / "model.safetensors")
        main(["convert", f"{__file__}:big", "-o", out, "--dtype", dtype], standalone_mode=False)


def _train_forever(folder: Path) -> None:
    model = big()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10**9):
        save_checkpoint(folder / "train.st", model, optimizer, counters={"step": step})


def _writing(folder: Path) -> bool:
    return any(".halfprec-" in p.name for p in folder.iterdir())


def _kill_one(job: str, folder: Path, mid_write: bool, rng: random.Random) -> bool:
    pid = os.fork()
    if pid == 0:  # the writer
        try:
            (_convert_forever if job == "convert" else _train_forever)(folder)
        finally:
            os._exit(0)
    deadline = time.monotonic() + 60
    if mid_write:
        while not _writing(folder) and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(rng.uniform(0, 0.003))
    else:
        time.sleep(rng.uniform(0.05, 0.6))
    hit = _writing(folder)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return hit


def run(folder: Path, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    report = {}
    for job in ("convert", "train"):
        hits = sum(_kill_one(job, folder, i % 2 == 1, rng) for i in range(KILLS))
        report[f"{job}_kills"] = KILLS
        report[f"{job}_mid_write"] = hits
    return report


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]), int(sys.argv[2]))))
