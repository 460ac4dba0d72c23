"""Memory of loading a .pt2 zip bomb: a real tiny export plus one deflated member of zeros.

    PYTHONPATH=src python benchmarks/zip_bomb.py [--mib 256] [--baseline REV] [--rounds 3]

Each load runs in a fresh interpreter that prints its peak RSS growth during
``load_artifact`` (imports done first) and the outcome. ``--baseline REV`` also loads the
file with halfprec's ``src`` as it was at git revision REV (``git archive``), interleaved
with the current one, ``--rounds`` times each.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import resource, sys
from halfprec.export import load_artifact
from halfprec.export import exported_program, safe_pt2  # imports before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_artifact(sys.argv[1])
    outcome = "loaded"
except Exception as exc:
    outcome = f"refused ({type(exc).__name__})"
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(f"{grown / 1024:.0f} {outcome}")
"""


def _bomb(folder: Path, mib: int) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    import halfprec
    from support.export_models import example_inputs, tiny

    good = folder / "good.pt2"
    halfprec.export(tiny(), example_inputs(), good, "fp16")
    bomb = folder / "bomb.pt2"
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(bomb, "w") as zout:
        root = zin.infolist()[0].filename.split("/", 1)[0]
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        member = zipfile.ZipInfo(f"{root}/data/weights/weight_99")
        member.compress_type = zipfile.ZIP_DEFLATED
        with zout.open(member, "w") as f:
            for _ in range(mib):
                f.write(bytes(2**20))
    return bomb


def _src_at(rev: str, folder: Path) -> Path:
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(folder, filter="data")
    return folder / "src"


def _load(src: Path, path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], env=env, capture_output=True, text=True
    )
    return proc.stdout.strip() or proc.stderr.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bomb = _bomb(folder, args.mib)
        print(f"{bomb.stat().st_size / 1024:.0f} KiB file, {args.mib} MiB inflated")
        sources = {"now": ROOT / "src"}
        if args.baseline:
            sources[args.baseline] = _src_at(args.baseline, folder / "old")
        for _ in range(args.rounds):
            for name, src in sources.items():
                grown, _, outcome = _load(src, bomb).partition(" ")
                print(f"{name:10s} peak RSS +{grown} MiB while loading: {outcome}")


if __name__ == "__main__":
    main()
