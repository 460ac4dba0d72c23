"""The memory workers: how many run at once, and their results in order (real
subprocesses on a tiny model file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from halfprec.bench.variants import Variant
from halfprec.bench.worker import measure_in_subprocesses, parallel_workers

GIB_KIB = 2**20

TINY = """
import torch
from torch import nn


def tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 8))


def example_inputs():
    return torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
"""


def test_two_workers_at_once_only_with_two_cores_and_memory_for_both() -> None:
    model = 2**30  # a 1 GiB fp32 model: each worker is taken to need 2 x (2 + 1) GiB
    assert parallel_workers(model, 4, available_kib=64 * GIB_KIB, cores=16) == 2
    assert parallel_workers(model, 4, available_kib=64 * GIB_KIB, cores=1) == 1
    assert parallel_workers(model, 1, available_kib=64 * GIB_KIB, cores=2) == 1  # one job
    assert parallel_workers(model, 4, available_kib=8 * GIB_KIB, cores=2) == 1  # 12 GiB
    assert parallel_workers(model, 4, available_kib=12 * GIB_KIB, cores=2) == 2
    assert parallel_workers(model, 4, available_kib=None, cores=2) == 1  # not readable


@pytest.mark.slow
def test_workers_run_side_by_side_and_answer_in_the_order_asked(tmp_path: Path) -> None:
    spec = f"{tmp_path / 'tiny.py'}:tiny"
    (tmp_path / "tiny.py").write_text(TINY)
    # openvino-fp32 needs an example batch the worker does not trace on: its build fails
    jobs = [(Variant("fp32"), 4), (Variant.parse("openvino-fp32"), 4), (Variant("fp32"), 64)]
    found = measure_in_subprocesses(spec, jobs, workers=2)
    assert [m.method for m in found] == ["rss subprocess", "failed", "rss subprocess"]
    assert all(m.peak_bytes > 50 * 2**20 for m in (found[0], found[2]))


STUCK = """
import subprocess, sys, time
from pathlib import Path


def stuck():
    here = Path(__file__).parent
    # a process of the worker's own (as a compile's workers are), then the worker hangs
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(here)])
    (here / "started").write_text("")
    time.sleep(120)
"""


def _running(marker: str) -> list[str]:
    """The processes whose command line holds ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if proc.name.isdigit() and marker in line:
            found.append(line)
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc for leftover processes")
def test_a_stopped_worker_leaves_no_process_and_says_why(tmp_path: Path) -> None:
    """bench's memory subprocess ran 186 s past a spent 120 s budget (BERT-base at load
    20): once ``stop`` gives a reason, the worker and the processes it started are killed,
    and the reason is the row's note."""
    (tmp_path / "stuck.py").write_text(STUCK)
    spec = f"{tmp_path / 'stuck.py'}:stuck"

    def stop() -> str | None:
        return "the budget is spent" if (tmp_path / "started").exists() else None

    found = measure_in_subprocesses(spec, [(Variant("fp32"), 1)], stop=stop)
    assert [(m.method, m.note) for m in found] == [("failed", "the budget is spent")]
    assert _running(str(tmp_path)) == []
    # asked before it starts, no worker is started
    again = measure_in_subprocesses(spec, [(Variant("fp32"), 1)], stop=lambda: "spent")
    assert again[0].note == "spent" and _running(str(tmp_path)) == []
