"""The halfprec bench suite: every variant on MiniLM, BERT-base, GPT-2 generation, a
channels_last CNN and EfficientNet-Lite0, with the issue's targets checked by measurement.

    HF_HUB_OFFLINE=1 PYTHONPATH=src python benchmarks/suite.py --out bench-out
    ... --models bert-base --compile        # add torch.compile twins (minutes to compile)

Prints one table per model, the target checks, and writes ``suite.json``, ``suite.md``
(Markdown tables for README) and ``suite.png`` under ``--out``. Variants of a half dtype
whose matmul probe runs more than ``--skip-slower-than`` times slower than fp32 are
skipped (fp16 on CPUs without AMX-FP16; ``--no-skip`` times them anyway), and any call
over ``--max-call-s`` is timed once, so the suite stays within about ten minutes on a
quiet 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from halfprec.atomic import write_text_atomic  # noqa: E402
from halfprec.batch import call  # noqa: E402
from halfprec.bench.results import BenchConfig, BenchResult, fastest_variant  # noqa: E402
from halfprec.bench.runner import benchmark  # noqa: E402
from halfprec.bench.variants import Variant, build_variant  # noqa: E402
from halfprec.convert.core import Recipe, convert  # noqa: E402
from halfprec.dtypes import resolve_device  # noqa: E402
from halfprec.io.specs import load_model  # noqa: E402
from halfprec.report.bench import markdown_table, print_bench, write_chart  # noqa: E402
from halfprec.timing import now, synchronize  # noqa: E402
from halfprec.tree import map_tensors  # noqa: E402

HERE = Path(__file__).resolve().parent
SUITE_MODELS = str(HERE / "suite_models.py")
HALF = ["naive-fp16", "naive-bf16", "autocast-fp16", "autocast-bf16"]
HALFPREC = ["halfprec-fp16", "halfprec-bf16"]


@dataclass(frozen=True)
class Entry:
    key: str
    spec: str
    batch_sizes: tuple[int, ...]
    variants: tuple[str, ...] = ("fp32", *HALF, *HALFPREC)
    compile_variants: tuple[str, ...] = ()
    unit: str = "samples"
    items_per_sample: int = 1
    skip_slow: bool = True
    notes: list[str] = field(default_factory=list)


def entries() -> list[Entry]:
    from suite_models import NEW_TOKENS  # type: ignore[import-not-found]

    return [
        Entry("minilm", "builtin:minilm", (1, 32)),
        Entry(
            "bert-base",
            "builtin:bert-base",
            (8,),
            compile_variants=("fp32+compile", "naive-bf16+compile", "halfprec-bf16+compile"),
        ),
        Entry(
            "gpt2-generate",
            f"{SUITE_MODELS}:gpt2_generation",
            (1,),
            unit="tokens",
            items_per_sample=NEW_TOKENS,
        ),
        Entry("cnn-channels-last", f"{SUITE_MODELS}:cnn_channels_last", (8, 32)),
        Entry("efficientnet-lite0", f"{SUITE_MODELS}:efficientnet_lite0", (8,)),
    ]


def boundary_overhead(runs: int) -> dict[str, Any]:
    """halfprec's boundary and IO casting cost on MiniLM at batch 1: halfprec bf16 without
    norm islands (the same kernels as naive bf16) against naive bf16, calls interleaved so
    that machine noise hits both alike. Also reports what the fp32 norm islands cost."""
    loaded = load_model("builtin:minilm")
    batch = {k: v[:1] for k, v in loaded.example_inputs[0].items()}
    models = {
        "naive-bf16": build_variant(loaded.model, Variant("naive", torch.bfloat16)),
        "halfprec-bf16 no islands": convert(loaded.model, Recipe(dtype="bf16", norm_islands=False)),
        "halfprec-bf16": convert(loaded.model, "bf16"),
    }
    samples: dict[str, list[float]] = {k: [] for k in models}
    with torch.inference_mode():
        for m in models.values():
            for _ in range(3):
                call(m, batch)
        for _ in range(runs):
            for name, m in models.items():
                start = now()
                call(m, batch)
                synchronize("cpu")
                samples[name].append(now() - start)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "median_ms": {k: v * 1e3 for k, v in med.items()},
        "boundary_overhead": med["halfprec-bf16 no islands"] / med["naive-bf16"] - 1,
        "islands_cost": med["halfprec-bf16"] / med["halfprec-bf16 no islands"] - 1,
        "runs": runs,
    }


def run_entry(entry: Entry, args: argparse.Namespace) -> BenchResult | str:
    try:
        loaded = load_model(entry.spec)
    except Exception as exc:  # a missing optional package: say so and go on
        return f"{entry.key}: not run ({exc})"
    device = resolve_device(args.device)
    loaded.model.to(device)
    batches = [map_tensors(lambda t: t.to(device), b) for b in loaded.example_inputs]
    variants = list(entry.variants) + (list(entry.compile_variants) if args.compile else [])
    config = BenchConfig(
        batch_sizes=entry.batch_sizes,
        warmup=2,
        runs=args.runs,
        max_call_s=args.max_call_s,
        max_variant_s=args.max_variant_s,
        items_per_sample=entry.items_per_sample,
        unit=entry.unit,
        memory="none" if args.no_memory else "first",
        skip_slower_than=None if args.no_skip or not entry.skip_slow else args.skip_slower_than,
    )

    def progress(step: int, total: int, label: str) -> None:
        print(f"  [{entry.key} {step}/{total}] {label}", file=sys.stderr, flush=True)

    return benchmark(
        loaded.model,
        batches,
        variants=variants,
        bench=config,
        spec=None if args.no_memory else entry.spec,
        name=entry.key,
        progress=progress,
    )


def target_lines(results: dict[str, BenchResult], overhead: dict[str, Any] | None) -> list[str]:
    lines = []
    bert = results.get("bert-base")
    if bert is not None:
        hp, naive = bert.get("halfprec-bf16"), bert.get("naive-bf16")
        cos = hp.comparison.worst_cosine if hp.comparison else float("nan")
        lines.append(
            f"BERT-base b8 s128: halfprec-bf16 {hp.speedup or 0:.2f}x fp32 (target >= 3.2x on "
            f"AMX; naive bf16 {naive.speedup or 0:.2f}x here), cosine {cos:.6f} "
            f"({'meets' if cos >= 0.9999 else 'misses'} >= 0.9999)"
        )
        comp = [r for r in bert.results if r.name == "halfprec-bf16+compile"]
        if comp:
            lines.append(
                f"BERT-base halfprec-bf16+compile: {comp[0].speedup or 0:.2f}x fp32 "
                f"(target >= 4x: {'met' if (comp[0].speedup or 0) >= 4 else 'not met here'}; "
                f"{comp[0].status})"
            )
    for key, res in results.items():
        for size in res.batch_sizes:
            auto = fastest_variant(res, size)
            lines.append(
                f"{key} batch {size}: measured auto picks {auto.name} "
                f"({auto.speedup or 1:.2f}x fp32; never slower than fp32 by construction)"
            )
    if overhead is not None:
        lines.append(
            f"MiniLM batch 1: halfprec boundary + IO casting overhead "
            f"{overhead['boundary_overhead']:+.1%} vs naive bf16 (target <= 5%); fp32 norm "
            f"islands cost {overhead['islands_cost']:+.1%} more"
        )
    return lines


def summary_table(results: dict[str, BenchResult]) -> str:
    """One row per model and batch size: fp32 latency, each variant's speedup (cosine)."""
    names = list(dict.fromkeys(r.name for res in results.values() for r in res.results))
    names.remove("fp32")
    head = ["model", "batch", "fp32 ms", *names, "auto picks"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, res in results.items():
        for size in res.batch_sizes:
            rows = {r.name: r for r in res.at(size)}
            fp32 = rows["fp32"]
            cells = [key, str(size), f"{(fp32.median_s or 0) * 1e3:.0f}"]
            for n in names:
                r = rows.get(n)
                if r is None:
                    cells.append("")
                elif r.status in ("skipped", "failed"):
                    cells.append(r.status)
                else:
                    cos = r.comparison.worst_cosine if r.comparison and r.comparison.outputs else 0
                    mark = "*" if r.status == "capped" else ""
                    cells.append(f"{r.speedup or 0:.2f}x{mark} ({cos:.5f})")
            cells.append(fastest_variant(res, size).name)
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda if present)")
    parser.add_argument("--models", default=None, help="comma-separated subset of the keys")
    parser.add_argument("--compile", action="store_true", help="add torch.compile twins")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--max-call-s", type=float, default=10.0)
    parser.add_argument("--max-variant-s", type=float, default=10.0)
    parser.add_argument("--skip-slower-than", type=float, default=2.0)
    parser.add_argument(
        "--no-skip", action="store_true", help="time slow dtypes too (each call capped)"
    )
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--overhead-runs", type=int, default=30)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    chosen = entries()
    if args.models:
        keys = [k.strip() for k in args.models.split(",")]
        unknown = set(keys) - {e.key for e in chosen}
        if unknown:
            parser.error(f"unknown models {sorted(unknown)}; choose from {[e.key for e in chosen]}")
        chosen = [e for e in chosen if e.key in keys]
    started = now()
    results: dict[str, BenchResult] = {}
    skipped: list[str] = []
    for entry in chosen:
        print(f"== {entry.key} ({entry.spec})", file=sys.stderr, flush=True)
        out = run_entry(entry, args)
        if isinstance(out, str):
            skipped.append(out)
            print(out)
            continue
        results[entry.key] = out
        print_bench(out)
    overhead = None
    if any(e.key == "minilm" for e in chosen) and resolve_device(args.device).type == "cpu":
        overhead = boundary_overhead(args.overhead_runs)
    targets = target_lines(results, overhead)
    elapsed = now() - started
    print("\n".join(["", "targets:", *("  " + t for t in targets), *skipped]))
    print(f"suite took {elapsed:.0f} s")
    machine = next(iter(results.values())).machine.summary() if results else ""
    data = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine,
        "load_average": os.getloadavg(),
        "seconds": elapsed,
        "targets": targets,
        "skipped_models": skipped,
        "boundary_overhead": overhead,
        "models": {k: r.to_json() for k, r in results.items()},
    }
    write_text_atomic(args.out / "suite.json", json.dumps(data, indent=1, default=str) + "\n")
    md = [f"Measured {data['date_utc']} on {machine}; load average {os.getloadavg()[0]:.1f}.", ""]
    legend = "Speedup over fp32 (worst cosine vs fp32); * timed once (over the per-call cap)."
    md += [summary_table(results), "", legend, ""]
    for key, res in results.items():
        md += [f"**{key}** ({res.unit}/s)", "", markdown_table(res), ""]
    md += ["Targets:", "", *(f"- {t}" for t in targets), *(f"- {s}" for s in skipped)]
    write_text_atomic(args.out / "suite.md", "\n".join(md) + "\n")
    if results:
        write_chart(list(results.values()), args.out / "suite.png", first_size_only=True)
    print(f"wrote {args.out}/suite.json, suite.md, suite.png")


if __name__ == "__main__":
    main()
