"""The held-out hazard set (issue 21): is halfprec ever worse than torch.autocast?

    OMP_NUM_THREADS=1 PYTHONPATH=src python3 benchmarks/heldout.py \
        [--dtypes fp16,bf16] [--only vq-argmin,euler-ode] [--variants naive,autocast,convert,tune]

For each model of :mod:`testbed.heldout` (18 hazards and a control) and each
dtype, scores naive ``.to(dtype)``, ``torch.autocast``, ``halfprec.convert`` defaults and
``halfprec.tune`` (tuned on batch 0, judged on all batches) with ``halfprec.compare``'s
verdict against fp32 (see :mod:`testbed.heldout_run`). Prints one markdown table,
the totals per dtype, tune's fp32 share of FLOPs and the reason for every failure.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch

from halfprec.dtypes import dtype_name, parse_dtype
from halfprec.timing import now

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testbed/
from testbed.heldout import HELDOUT  # noqa: E402
from testbed.heldout_run import VARIANTS, HazardRun, markdown, run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--only", default="", help="comma-separated hazard names")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    dtypes = tuple(parse_dtype(d) for d in args.dtypes.split(","))
    variants = tuple(args.variants.split(","))
    names = args.only.split(",") if args.only else list(HELDOUT)
    for given, known, what in ((names, HELDOUT, "hazard"), (variants, VARIANTS, "variant")):
        unknown = [n for n in given if n not in known]
        if unknown:
            print(
                f"heldout.py: error: unknown {what} {', '.join(unknown)}; "
                f"choose from {', '.join(known)}",
                file=sys.stderr,
            )
            return 2
    start = now()
    runs: list[HazardRun] = []
    for name in names:
        r = run(HELDOUT[name], dtypes, variants)
        runs.append(r)
        cells = ", ".join(
            f"{v} {dtype_name(dt)} {'pass' if s.passed else 'fail'}"
            for dt, by in r.scores.items()
            for v, s in by.items()
        )
        print(f"{name}: {cells} ({r.seconds:.1f} s)", file=sys.stderr, flush=True)
    elapsed = now() - start
    print(markdown(runs))
    print(f"\n{len(runs)} models, {elapsed:.0f} s on {torch.get_num_threads()} thread(s).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
