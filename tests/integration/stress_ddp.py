"""Run the distributed jobs again and again beside two CPU burners; count the failures.

    python tests/integration/stress_ddp.py --runs 30                 # tests/integration/test_ddp.py
    python tests/integration/stress_ddp.py --runs 30 --what jobs     # its two torchrun jobs only

``--what tests`` runs ``pytest tests/integration/test_ddp.py`` (both torchrun jobs and the
single-process reference); ``--what jobs`` runs the two torchrun jobs directly (faster).
Each failing run's log is kept under ``--logs``. No retries: a run either passes or counts.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from burn import burning

ROOT = Path(__file__).resolve().parents[2]

_TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _commands(what: str, out: Path) -> list[list[str]]:
    if what == "tests":
        test = str(ROOT / "tests" / "integration" / "test_ddp.py")
        return [[sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test]]
    job = str(ROOT / "tests" / "integration" / "ddp_job.py")
    example = str(ROOT / "examples" / "train_distributed.py")
    ckpt = str(out / "digits.safetensors")
    return [
        [*_TORCHRUN, job, str(out)],
        [*_TORCHRUN, example, "--dtype", "fp16", "--epochs", "1", "--checkpoint", ckpt],
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--what", choices=["tests", "jobs"], default="tests")
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()) / "stress_ddp")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the burners are stopped
    args.logs.mkdir(parents=True, exist_ok=True)
    paths = [ROOT / "src", ROOT / "tests" / "integration", ROOT / "examples"]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(map(str, paths))
    failed = 0
    with burning(args.burners):
        for run in range(1, args.runs + 1):
            start = time.monotonic()
            ok = True
            with tempfile.TemporaryDirectory() as tmp:
                for cmd in _commands(args.what, Path(tmp)):
                    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
                    if proc.returncode != 0:
                        ok = False
                        log = args.logs / f"run{run}.log"
                        log.write_text(f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
                        break
            failed += not ok
            status = "ok" if ok else f"FAILED (log: {args.logs}/run{run}.log)"
            print(f"run {run}/{args.runs}: {status} {time.monotonic() - start:.0f}s", flush=True)
    print(f"{failed} of {args.runs} runs failed ({args.what}, {args.burners} burners)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
