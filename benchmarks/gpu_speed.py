"""fp16/bf16 vs fp32 on CUDA, eager and compiled (max-autotune), TF32 off: docs/gpu.md,
rewritten as the current page (one table per model, with the GPU, the date and the command).
Run by scripts/gpu-check.sh.

    PYTHONPATH=src python3 benchmarks/gpu_speed.py [--models bert-base,minilm] [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

import torch

from halfprec.bench.results import BenchConfig, fastest_variant
from halfprec.bench.runner import benchmark
from halfprec.io.specs import load_model
from halfprec.report.bench import markdown_table

VARIANTS = ["fp32", "naive-fp16", "naive-bf16", "halfprec-fp16", "halfprec-bf16"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="bert-base,minilm")
    parser.add_argument("--dry-run", action="store_true", help="print, do not write docs/gpu.md")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_speed: no CUDA device here; run it on a machine with a GPU")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(0)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Measured on a GPU\n",
        "Written by `scripts/gpu-check.sh` (`benchmarks/gpu_speed.py`); each run replaces this",
        "page. CPU measurements are in [benchmarks.md](benchmarks.md).\n",
        f"*Measured {stamp} · {name} x {torch.cuda.device_count()}, torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}, TF32 off, compiled = torch.compile(mode='max-autotune') · "
        f"`scripts/gpu-check.sh` (models: {args.models})*\n",
    ]
    for model_name in args.models.split(","):
        loaded = load_model(f"builtin:{model_name}")
        model = loaded.model.cuda()
        batch = {k: v.cuda() for k, v in loaded.example_inputs[0].items()}
        result = benchmark(
            model,
            batch,
            variants=VARIANTS,
            compile=True,
            bench=BenchConfig(runs=20, memory="none", max_call_s=30.0),
            name=loaded.name,
        )
        best = fastest_variant(result)
        limits = ", ".join(f"{k} {v:.2f}x" for k, v in result.to_json()["limit"].items())
        lines += [
            f"\n## {loaded.name}\n",
            f"GEMM limit: {limits}; auto: {best.name} "
            f"({best.speedup or 1:.2f}x, {best.efficiency or 1:.0%} of limit)\n",
            markdown_table(result),
            "",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.dry_run:
        Path("docs/gpu.md").write_text(text.lstrip("\n"))


if __name__ == "__main__":
    main()
