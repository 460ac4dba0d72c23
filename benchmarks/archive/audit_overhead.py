"""Audit cost vs a plain forward of the same converted model, on BERT-base, MiniLM-L6 and
GPT-2 architectures (transformers configs, random weights: dtype leaks do not depend on the
weights), plus the leaks the audit reports in fp16.

    PYTHONPATH=src python benchmarks/archive/audit_overhead.py [--dtype bf16] [--seq 128] [--reps 5]

Prints the median time of each after one warm-up call, runs interleaved so that load from
other processes hits both alike, and the ratio audit / plain.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

from halfprec import Recipe, audit, convert
from halfprec.batch import call
from halfprec.timing import now

MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "bert-base": lambda: BertModel(BertConfig()),
    "minilm": lambda: BertModel(
        BertConfig(
            hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536
        )
    ),
    "gpt2": lambda: GPT2LMHeadModel(GPT2Config()),
}


def _batch(seq: int) -> dict[str, Any]:
    ids = torch.randint(0, 20000, (1, seq))
    mask = torch.ones_like(ids)
    mask[0, seq * 3 // 4 :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    opts = parser.parse_args()
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, dtype {opts.dtype}, "
        f"seq {opts.seq}, median of {opts.reps} after warm-up"
    )
    for name in opts.models.split(","):
        model = MODELS[name]().eval()
        batch = _batch(opts.seq)
        half = convert(model, Recipe(dtype=opts.dtype, guard_boundaries=False))
        with torch.no_grad():
            call(half, batch)
        audit(half, batch)
        plain, audited = [], []
        for _ in range(opts.reps):
            start = now()
            with torch.no_grad():
                call(half, batch)
            plain.append(now() - start)
            start = now()
            report = audit(half, batch)
            audited.append(now() - start)
        p, a = statistics.median(plain), statistics.median(audited)
        leaks16 = audit(model, _batch(32), "fp16")
        print(
            f"{name:10s} plain {p * 1000:8.1f} ms  audit {a * 1000:8.1f} ms  ratio {a / p:5.2f}x"
            f"  ops/forward {report.ops}  leaks({opts.dtype}) {len(report.leaks)}"
            f"  leaks(fp16) {len(leaks16.leaks)}"
        )
        for leak in leaks16.leaks:
            print(f"    {leak.kind} {leak.location} {leak.op} x{leak.count}: {leak.code}")


if __name__ == "__main__":
    main()
