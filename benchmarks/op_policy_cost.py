"""What the default op policy costs: naive half, autocast, and convert with and without
the policy, timed in one interleaved run (issue 21's latency acceptance).

Per model and dtype, every round calls each variant once, in turn; the table gives each
variant's median with its interquartile range, the ratio of convert (default recipe) to
naive half with the IQR of the per-round ratios, and the cosine against fp32.

The row ``fp32 under the policy's mode`` runs the fp32 model inside the op policy's
TorchFunctionMode, which then casts nothing: its ratio to fp32 is the mode's own Python
cost per forward, measurable even on a CPU whose half kernels are emulated (there the half
variants take minutes per call: ``--no-half`` skips them).

    HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/op_policy_cost.py [--rounds 15]
        [--minilm-batch 32] [--bert-batch 8] [--bert-seq 128] [--no-half]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import halfprec
from halfprec.batch import call, resize_batch
from halfprec.bench.machine import machine_info
from halfprec.convert.op_policy import Fp32OpsMode
from halfprec.io.zoo import BUILTINS, token_batch
from halfprec.tree import flatten, map_tensors


def _naive(model: nn.Module, dtype: torch.dtype) -> Callable[[Any], Any]:
    naive = copy.deepcopy(model).to(dtype)

    def run(batch: Any) -> Any:
        cast = map_tensors(lambda t: t.to(dtype) if t.is_floating_point() else t, batch)
        return call(naive, cast)

    return run


def _autocast(model: nn.Module, dtype: torch.dtype) -> Callable[[Any], Any]:
    def run(batch: Any) -> Any:
        with torch.autocast("cpu", dtype=dtype):
            return call(model, batch)

    return run


def _in_mode(model: nn.Module, dtype: torch.dtype) -> Callable[[Any], Any]:
    ops = frozenset(halfprec.Recipe().fp32_ops)

    def run(batch: Any) -> Any:
        with Fp32OpsMode(dtype, ops):
            return call(model, batch)

    return run


def _variants(model: nn.Module, dtype: torch.dtype, half: bool) -> dict[str, Callable[[Any], Any]]:
    out: dict[str, Callable[[Any], Any]] = {
        "fp32": lambda b: call(model, b),
        "fp32 under the policy's mode": _in_mode(model, dtype),
    }
    if half:
        off = halfprec.convert(model, halfprec.Recipe(dtype, fp32_ops=()))
        default = halfprec.convert(model, dtype)
        out["naive"] = _naive(model, dtype)
        out["autocast"] = _autocast(model, dtype)
        out["convert, no op policy"] = lambda b: call(off, b)
        out["convert (default)"] = lambda b: call(default, b)
    return out


def _cosine(ref: Any, out: Any) -> float:
    r, o = flatten(ref), flatten(out)
    key = next(k for k in r if r[k].is_floating_point())
    a, b = r[key].double().flatten(), o[key].double().flatten()
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--minilm-batch", type=int, default=32)
    parser.add_argument("--bert-batch", type=int, default=8)
    parser.add_argument("--bert-seq", type=int, default=128)
    parser.add_argument("--no-half", action="store_true", help="only the mode's own cost")
    args = parser.parse_args()
    print(machine_info().summary())
    cases: list[tuple[str, nn.Module, Any]] = []
    minilm, batches = BUILTINS["minilm"].build()
    sentences = resize_batch(batches[0], args.minilm_batch)
    cases.append((f"MiniLM b{args.minilm_batch} (real weights)", minilm, sentences))
    bert, _ = BUILTINS["bert-base"].build()
    size = f"b{args.bert_batch}x{args.bert_seq}"
    cases.append((f"BERT-base {size}", bert, token_batch(30522, args.bert_batch, args.bert_seq)))
    print("| model | dtype | variant | median ms | IQR ms | cosine vs fp32 |")
    print("|---|---|---|---|---|---|")
    for label, model, batch in cases:
        for name in args.dtypes.split(","):
            dtype = halfprec.dtypes.parse_dtype(name)
            variants = _variants(model, dtype, half=not args.no_half)
            times: dict[str, list[float]] = {k: [] for k in variants}
            outs: dict[str, Any] = {}
            with torch.inference_mode():
                for fn in variants.values():
                    fn(batch)  # warm-up
                for _ in range(args.rounds):
                    for k, fn in variants.items():
                        t0 = time.perf_counter()
                        outs[k] = fn(batch)
                        times[k].append(time.perf_counter() - t0)
            for k, ts in times.items():
                lo, mid, hi = _quartiles(ts)
                cos = _cosine(outs["fp32"], outs[k])
                spread = f"{1e3 * lo:.1f}-{1e3 * hi:.1f}"
                print(f"| {label} | {name} | {k} | {1e3 * mid:.1f} | {spread} | {cos:.6f} |")
            for top, bottom in (
                ("fp32 under the policy's mode", "fp32"),
                ("convert (default)", "naive"),
            ):
                if top not in times:
                    continue
                ratios = [a / b for a, b in zip(times[top], times[bottom], strict=True)]
                lo, mid, hi = _quartiles(ratios)
                what = f"**{top} / {bottom}**"
                print(f"| {label} | {name} | {what} | **{mid:.3f}** | {lo:.3f}-{hi:.3f} | |")


if __name__ == "__main__":
    main()
