"""How many rounds deploy times, and their seconds, for given per-call seconds: a replay.

``HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/race_replay.py --compiled 0.46``
runs the real ``halfprec.deploy`` (bf16, eager and compiled, runtimes as installed) on a
small MLP, with every timed call's seconds injected by variant: by default BERT-base at
batch 8 on a quiet 2-core Zen 4 (fp32 1.1 s, OpenVINO's bf16 0.47 s, eager bf16 0.65 s,
the compiled bf16 ``--compiled``), each call off by up to 1.5% in a fixed pattern, and
fp32+compile 5 s (on BERT-base the compile gate does not compile it; its pair is left out
of the total). It prints the choice, the timed calls per variant (the race's and the end's)
and the seconds they add up to: what the race's rules cost in timed calls, with the
machine's noise and the compile's time taken out. Run it with another ``PYTHONPATH`` to
compare two versions' rules.
"""

from __future__ import annotations

import argparse
import collections
import os
from collections.abc import Callable

import torch
from torch import nn

import halfprec
from halfprec.bench.variants import Variant

JITTER = (1.0, 1.015, 0.985, 1.01, 0.99, 1.005)
_GATED = "fp32+compile"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fp32", type=float, default=1.1, help="seconds of an fp32 call")
    parser.add_argument("--openvino", type=float, default=0.47, help="openvino-bf16's")
    parser.add_argument("--eager", type=float, default=0.65, help="halfprec-bf16's")
    parser.add_argument("--compiled", type=float, default=0.46, help="halfprec-bf16+compile's")
    args = parser.parse_args()
    seconds = {
        "fp32": args.fp32,
        "openvino-bf16": args.openvino,
        "halfprec-bf16": args.eager,
        "halfprec-bf16+compile": args.compiled,
        _GATED: 5.0,
    }
    calls: collections.Counter[str] = collections.Counter()
    spent: collections.Counter[str] = collections.Counter()

    def timer(fn: Callable[[], object], variant: Variant) -> float:
        fn()
        n = calls[variant.name]
        calls[variant.name] += 1
        t = seconds[variant.name] * JITTER[n % len(JITTER)]
        spent[variant.name] += t
        return t

    os.environ["HALFPREC_RACE_CACHE"] = "0"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).eval()
    done = halfprec.deploy(model, torch.randn(8, 64), "bf16", timer=timer)
    gated = spent[_GATED] + calls[_GATED] * args.fp32
    calls["fp32"] -= calls[_GATED]
    rows = ", ".join(f"{k} {v}" for k, v in calls.items() if k != _GATED)
    print(f"choice {done.variant}; timed calls: {rows} (fp32+compile's pair left out)")
    print(f"timed seconds: {sum(spent.values()) - gated:.1f}")


if __name__ == "__main__":
    main()
