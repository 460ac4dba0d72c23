"""The GPU check's steps, one per call: ``python3 scripts/gpu_steps/run.py STEP --out FILE``.

``scripts/gpu-check.sh`` calls it once per step, each under its own ``timeout``; every
step appends its section to FILE as soon as it ends. ``--dry-run``: on the CPU, at tiny
sizes, no timing claims. ``--header`` (or the step ``header``): first append the line that
names the machine, torch and the date.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()  # the step's limit counts from the process start, imports included

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from common import MARGIN_S, Context, Skip, run_step  # noqa: E402


def _lazy(module: str, name: str, compiles: bool = False) -> Callable[[Context], list[str]]:
    """The step ``module.name``, imported when it runs: a step module imports halfprec and
    what the step needs (rich, safetensors, ...), and a missing package must make that
    step "skipped" (see ``common.run_step``), not every step a crash. A step that
    ``compiles`` (inductor's C++ or Triton code) is skipped with the reason where
    gpu-check.sh found no C compiler or no Python headers (``GPU_CHECK_NO_COMPILE``)."""

    def step(ctx: Context) -> list[str]:
        if compiles and os.environ.get("GPU_CHECK_NO_COMPILE"):
            raise Skip(f"compiles code, and {os.environ['GPU_CHECK_NO_COMPILE']}")
        found: Callable[[Context], list[str]] = getattr(importlib.import_module(module), name)
        return found(ctx)

    return step


# name: (number, title, step), in the order the check runs them
STEPS: dict[str, tuple[int, str, Callable[[Context], list[str]]]] = {
    "tests": (1, "CUDA tests (tests/integration/test_cuda.py)", _lazy("tool_steps", "cuda_tests")),
    "compile": (
        2,
        "max-autotune MLP: the first output kept across a second call",
        _lazy("infer_steps", "compiled_kept_output", compiles=True),
    ),
    "bench": (
        3,
        "bench BERT-base eager: fp32, naive, autocast, halfprec fp16/bf16",
        _lazy("infer_steps", "bench_bert"),
    ),
    "gemm": (
        4,
        "one GEMM: per-call sync against CUDA events",
        _lazy("infer_steps", "gemm_two_ways"),
    ),
    "scaler": (
        5,
        'MixedPrecision("fp16") for 20 steps with one injected inf',
        _lazy("train_steps", "scaler_with_an_inf"),
    ),
    "stochastic": (
        6,
        "bf16 + StochasticAdamW on 100M parameters against AdamW",
        _lazy("train_steps", "stochastic_adamw_step", compiles=True),
    ),
    "export": (
        7,
        "halfprec export builtin:minilm to .onnx and .pt2",
        _lazy("tool_steps", "export_minilm"),
    ),
    "ddp": (8, "one-process torchrun: DDP and FSDP2", _lazy("dist_steps", "ddp_and_fsdp2")),
    "tf32": (9, "bench after the new TF32 API", _lazy("infer_steps", "bench_after_tf32")),
}


def _header(ctx: Context) -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if ctx.dry_run:
        where = "dry run on the CPU at tiny sizes: no measurement, only that every step runs"
    else:
        where = (
            f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, "
            f"CUDA {torch.version.cuda}"
        )
    return (
        f"\n## The last run\n\n*{stamp} · {where} · torch {torch.__version__}, "
        f"Python {sys.version.split()[0]} · `scripts/gpu-check.sh"
        f"{' --dry-run' if ctx.dry_run else ''}`*\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("step", choices=["header", *STEPS])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--header", action="store_true", help="write the header first")
    parser.add_argument("--limit", type=float, help="the step's limit in gpu-check.sh (s)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    deadline = None if args.limit is None else STARTED + args.limit - MARGIN_S
    ctx = Context(dry_run=args.dry_run, out=args.out, deadline=deadline, hard_stop=True)
    if not ctx.dry_run and not torch.cuda.is_available():
        print("gpu-check: no CUDA device visible to torch; run with --dry-run", file=sys.stderr)
        return 2
    if args.header or args.step == "header":
        with ctx.out.open("a") as f:
            f.write(_header(ctx))
        if args.step == "header":
            return 0
    number, title, step = STEPS[args.step]
    return run_step(ctx, number, title, step)


if __name__ == "__main__":
    sys.exit(main())
