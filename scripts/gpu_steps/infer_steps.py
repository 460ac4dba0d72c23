"""Steps 2, 3, 4 and 9: a compiled model's kept output, bench on BERT-base, one GEMM
timed two ways, and bench after the new TF32 API."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from common import Context, Skip, need
from torch import nn

import halfprec
from halfprec.dtypes import parse_dtype
from halfprec.fp32 import exact_fp32
from halfprec.io.specs import load_model
from halfprec.report.bench import markdown_table
from halfprec.timing import Stopwatch

__all__ = ["bench_bert", "compiled_kept_output", "gemm_two_ways", "bench_after_tf32"]


def _mlp(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(width, 4 * width), nn.GELU(), nn.LayerNorm(4 * width), nn.Linear(4 * width, 8)
    ).eval()


def _close(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def compiled_kept_output(ctx: Context) -> list[str]:
    """Step 2: a halfprec model compiled with max-autotune (CUDA graphs on a GPU); the
    first output is kept, the model called again, and the kept output read back."""
    width = ctx.size(256, 16)
    half = halfprec.convert(_mlp(width).to(ctx.device), ctx.half)
    # a dry run compiles with inductor too (C++ on the CPU), in its default mode: no CUDA
    # graphs to capture there, and max-autotune's GEMM search would take minutes
    mode = "default" if ctx.dry_run else "max-autotune"
    backend = "inductor"
    compiled = torch.compile(half, mode=mode, backend=backend)
    x1, x2 = (torch.randn(32, width, device=ctx.device) for _ in range(2))
    with torch.no_grad():
        want1, want2 = half(x1), half(x2)
        for _ in range(3):  # compile, record, replay
            compiled(x1)
        kept = compiled(x1)  # not cloned: what a caller who keeps outputs does
        compiled(x2)
        try:
            drift = _close(kept, want1)
            kept_text = f"the kept output reads back, max |diff| to eager {drift:.3g}"
            if drift > 0.05:
                kept_text += ": OVERWRITTEN by the second call"
        except RuntimeError as exc:  # "accessing tensor output of CUDAGraphs that has been..."
            kept_text = f"the kept output was overwritten and raises: {str(exc)[:160]}"
        torch.compiler.cudagraph_mark_step_begin()
        first = compiled(x1).clone()  # the documented way: clone what you keep
        torch.compiler.cudagraph_mark_step_begin()
        second = compiled(x2)
        safe = max(_close(first, want1), _close(second, want2))
    return [
        f"torch.compile(mode={mode!r}, backend={backend!r}) of halfprec {ctx.half}, "
        f"MLP width {width}",
        kept_text,
        f"with cudagraph_mark_step_begin() and a clone: max |diff| to eager {safe:.3g}"
        + (" (ok)" if safe < 0.05 else " (WRONG)"),
    ]


def _bert(ctx: Context) -> tuple[nn.Module, dict[str, torch.Tensor], str]:
    need("transformers")
    if not ctx.dry_run:
        loaded = load_model("builtin:bert-base")
        batch = {k: v.to(ctx.device) for k, v in loaded.example_inputs[0].items()}
        return loaded.model.to(ctx.device), batch, "BERT-base, batch 8 x 128"
    from tiny_model import tiny_bert, tiny_bert_example_inputs

    return tiny_bert(), tiny_bert_example_inputs()[0], "a 2-layer BERT of width 32 (dry run)"


def bench_bert(ctx: Context) -> list[str]:
    """Step 3: bench on BERT-base, eager: fp32, naive, autocast and halfprec in fp16 and
    bf16, with memory."""
    model, batch, what = _bert(ctx)
    variants = [
        f"{kind}-{d}" for kind in ("naive", "autocast", "halfprec") for d in ("fp16", "bf16")
    ]
    result = halfprec.benchmark(
        model,
        batch,
        variants=variants,
        bench=halfprec.BenchConfig(
            runs=ctx.size(20, 2),
            warmup=ctx.size(3, 1),
            memory="none" if ctx.dry_run else "first",  # CPU memory needs a spec's subprocess
            skip_slower_than=None,
            limit=False,  # the GEMM limit is step 4's, timed apart
            race=None,
            probe_cache=False,
        ),
        name=what,
    )
    table = markdown_table(result).splitlines()  # rendered in a dry run too: the same code
    if ctx.dry_run:  # what ran and the table's shape, no timings
        ran = [f"{v.variant.name} {v.status}" for v in result.results]
        rows = len(table) - 2  # less the header and its rule
        return [what, "variants: " + ", ".join(ran), f"table: {rows} rows under {table[0]}"]
    return [what, *table]


def _time(ctx: Context, fn: Callable[[], Any], calls: int) -> tuple[float, float]:
    """Per call: one call then a sync, each (the wall clock); and back-to-back calls in one
    :class:`~halfprec.timing.Stopwatch`, read from the device's events (the CPU's clock in
    a dry run)."""
    synced = []
    for _ in range(calls):
        one = Stopwatch(ctx.device).start()
        fn()
        synced.append(one.stop())
    run = Stopwatch(ctx.device).start()
    for _ in range(calls):
        fn()
    wall = run.stop()
    device = run.device_seconds
    return statistics.median(synced), (wall if device is None else device) / calls


def gemm_two_ways(ctx: Context) -> list[str]:
    """Step 4: one GEMM shape (BERT-base's FFN at batch 8 x 128), per-call sync against
    CUDA events over back-to-back calls, fp32 (IEEE) and half."""
    m, k, n = (ctx.size(1024, 32), ctx.size(768, 32), ctx.size(3072, 64))
    lines = [f"GEMM {m}x{k} @ {k}x{n}"]
    dtypes = {"fp32": torch.float32, ctx.half: parse_dtype(ctx.half)}
    with exact_fp32():
        for name, dtype in dtypes.items():
            a = torch.randn(m, k, device=ctx.device, dtype=dtype)
            b = torch.randn(k, n, device=ctx.device, dtype=dtype)
            for _ in range(3):
                a @ b
            ctx.sync()
            synced, events = _time(ctx, partial(torch.matmul, a, b), ctx.size(50, 3))
            flops = 2 * m * k * n
            rate = "" if ctx.dry_run else f", {flops / events / 1e12:.1f} TFLOP/s by events"
            lines.append(
                f"{name}: per-call sync {ctx.time(synced)}, events {ctx.time(events)}{rate}"
            )
    return lines


def bench_after_tf32(ctx: Context) -> list[str]:
    """Step 9: bench and check after the user set TF32 through torch's new API (a dry run:
    the CPU's equivalent, oneDNN matmuls in bf16); the setting must read back the same
    after both, and the check's reference must say it set the setting aside."""
    leaf, value, said = (
        ("mkldnn", "bf16", "oneDNN matmuls in bf16")
        if ctx.dry_run
        else ("cuda", "tf32", "CUDA matmuls in tf32")
    )
    matmul = getattr(torch.backends, leaf).matmul
    if not hasattr(matmul, "fp32_precision"):
        raise Skip(f"torch {torch.__version__} has no fp32_precision API to set")
    old = matmul.fp32_precision
    matmul.fp32_precision = value
    try:
        return _bench_and_check_under(ctx, matmul, value, said)
    finally:
        matmul.fp32_precision = old


def _bench_and_check_under(ctx: Context, matmul: Any, value: str, said: str) -> list[str]:
    model = _mlp(ctx.size(256, 16)).to(ctx.device)
    x = torch.randn(64, ctx.size(256, 16), device=ctx.device)
    lines = []
    try:
        result = halfprec.benchmark(
            model,
            x,
            variants=[f"halfprec-{ctx.half}"],
            bench=halfprec.BenchConfig(runs=3, memory="none", limit=False, race=None),
        )
        ran = [f"{v.variant.name} {v.status}" for v in result.results]
        lines.append(f"bench ran: {', '.join(ran)}; {result.machine.summary().split('; ')[-1]}")
    except Exception as exc:  # the defect this step looks for: "mix of the legacy and new APIs"
        lines.append(f"bench FAILED: {type(exc).__name__}: {str(exc)[:200]}")
    checked = halfprec.check(model, x, ctx.half, runs=0)
    set_aside = tuple(checked.comparison.set_aside)
    lines.append(f"check: {'PASS' if checked.passed else 'FAIL'}; set aside: {set_aside}")
    lines.append(f"setting after both: {matmul.fp32_precision!r} (set: {value!r})")
    if said not in set_aside:
        lines.append(f"FAILED: the reference does not say it set aside {said!r}")
    if any("FAILED" in line for line in lines) or matmul.fp32_precision != value:
        raise RuntimeError("; ".join(lines))
    return lines
