"""The breadth benchmark (issue 12): is halfprec ever worse than ``.to(dtype)``?

    HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/breadth.py \
        [--dtypes fp16,bf16] [--only bert,gpt2] [--markdown docs/breadth_table.md] [--json out.json]

Builds every architecture of :mod:`testbed.breadth_models` (transformers classes,
tiny configs, seeded random weights) and its stressed twin, and for each dtype runs the
fp32 reference, naive ``copy.deepcopy(m).to(dtype)``, the fp32 model under ``torch.autocast``,
``halfprec.check`` with defaults and,
for fp16, ``halfprec.tune``. Prints a markdown table with per-dtype totals (or writes it to
``--markdown``) and exits 1 when a rule breaks: convert failing where naive passes, or tune
failing on fp16 where the fp32 reference is finite.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

from halfprec.dtypes import dtype_name, parse_dtype
from halfprec.timing import now

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testbed/
from testbed.breadth import Case, markdown, run_arch, violations  # noqa: E402
from testbed.breadth_models import ARCHS, arch  # noqa: E402


def _json(c: Case) -> dict[str, object]:
    return {
        "arch": c.arch,
        "kind": c.kind,
        "stressed": c.stressed,
        "dtype": dtype_name(c.dtype),
        "reference_finite": c.reference_finite,
        **{k: v.__dict__ for k, v in c.verdicts().items()},
        "tune_param_share": c.tune_param_share,
        "tune_flops_share": c.tune_flops_share,
        "seconds": c.seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--only", default="", help="comma-separated architecture names")
    parser.add_argument("--max-evaluations", type=int, default=40)
    parser.add_argument("--markdown", default="", help="write the table here too")
    parser.add_argument("--json", default="", help="write every case as JSON here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    dtypes = [parse_dtype(d) for d in args.dtypes.split(",")]
    chosen = [arch(n) for n in args.only.split(",")] if args.only else list(ARCHS)
    start = now()
    cases: list[Case] = []
    for a in chosen:
        mine = run_arch(a, dtypes, max_evaluations=args.max_evaluations)
        cases += mine
        for c in mine:
            verdicts = ", ".join(f"{k} {v.status}" for k, v in c.verdicts().items())
            state = verdicts if c.reference_finite else "reference not finite"
            print(f"{c.label}: {state} ({c.seconds:.1f} s)", file=sys.stderr, flush=True)
    table = markdown(cases)
    elapsed = now() - start
    footer = (
        f"\n\n{len(chosen)} architectures x 2 twins, {len(cases)} cases, "
        f"{elapsed:.0f} s on {torch.get_num_threads()} threads."
    )
    print(table + footer)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(table + footer + "\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([_json(c) for c in cases], f, indent=1)
    broken = violations(cases)
    for line in broken:
        print(f"RULE BROKEN: {line}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
