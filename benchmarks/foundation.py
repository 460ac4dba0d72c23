"""fp32 vs naive ``.to(dtype)`` vs halfprec ``convert`` on MiniLM and BERT-base.

Prints medians of interleaved timed runs (after warm-up) and ratios to fp32, plus the
cosine of each variant's outputs against fp32. Variants are timed round-robin inside one
run so that machine noise hits them alike.

    HF_HUB_OFFLINE=1 python benchmarks/foundation.py [--dtype bf16] [--runs 15]
"""

from __future__ import annotations

import argparse
import copy
import statistics
from collections.abc import Callable

import torch

from halfprec import Recipe, convert
from halfprec.batch import call
from halfprec.compare import compare_outputs
from halfprec.dtypes import device_support, dtype_name, resolve_dtype
from halfprec.io.specs import load_model
from halfprec.timing import now
from halfprec.tree import map_tensors


def naive(model: torch.nn.Module, dtype: torch.dtype) -> Callable[[object], object]:
    """What people do today: model.to(dtype), cast floating inputs by hand."""
    half = copy.deepcopy(model).to(dtype)

    def run(batch: object) -> object:
        cast = map_tensors(lambda t: t.to(dtype) if t.is_floating_point() else t, batch)
        return call(half, cast)

    return run


def bench(spec: str, dtype: torch.dtype, runs: int, batch_size: int | None) -> None:
    loaded = load_model(spec)
    model = loaded.model
    batch = loaded.example_inputs[0]
    if batch_size is not None and isinstance(batch, dict):
        batch = {k: v[:batch_size] for k, v in batch.items()}
    variants: dict[str, Callable[[object], object]] = {
        "fp32": lambda b: call(model, b),
        f"naive {dtype_name(dtype)}": naive(model, dtype),
        f"halfprec {dtype_name(dtype)}": (lambda m: lambda b: call(m, b))(convert(model, dtype)),
        "halfprec -guards": (lambda m: lambda b: call(m, b))(
            convert(model, Recipe(dtype=dtype, guard_boundaries=False))
        ),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    outs: dict[str, object] = {}
    with torch.inference_mode():
        for name, fn in variants.items():  # warm-up
            outs[name] = fn(batch)
            fn(batch)
        for _ in range(runs):
            for name, fn in variants.items():
                start = now()
                fn(batch)
                times[name].append(now() - start)
    base = statistics.median(times["fp32"])
    shape = (
        "x".join(str(v) for v in next(iter(batch.values())).shape)
        if isinstance(batch, dict)
        else "?"
    )
    print(f"\n{spec} (input {shape}), {runs} interleaved runs, medians:")
    print(f"{'variant':<18}{'median ms':>11}{'vs fp32':>9}{'cosine':>10}")
    for name, samples in times.items():
        med = statistics.median(samples)
        cmp = compare_outputs([outs["fp32"]], [outs[name]], dtype=dtype)
        print(f"{name:<18}{med * 1e3:>11.1f}{base / med:>8.2f}x{cmp.worst_cosine:>10.6f}")
    h, n = (
        statistics.median(times[f"halfprec {dtype_name(dtype)}"]),
        statistics.median(times[f"naive {dtype_name(dtype)}"]),
    )
    print(f"halfprec / naive latency: {h / n:.3f} (target <= 1.05)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--models", default="builtin:minilm@32,builtin:minilm@1,builtin:bert-base")
    args = parser.parse_args()
    choice = resolve_dtype(args.dtype, "cpu")
    sup = device_support("cpu")
    print(
        f"machine: {sup.name}; features {', '.join(sup.features) or 'none'}; "
        f"threads {torch.get_num_threads()}; torch {torch.__version__}; dtype {choice.name}"
    )
    for item in args.models.split(","):
        spec, _, size = item.partition("@")
        bench(spec, choice.dtype, args.runs, int(size) if size else None)


if __name__ == "__main__":
    main()
