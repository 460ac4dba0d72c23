"""CPU runtimes side by side: torch eager and compiled, halfprec, onnxruntime and OpenVINO.

One interleaved run per model (``halfprec.benchmark``: every variant's timed calls
round-robin, each output compared with fp32 on all elements), over:

- ``fp32`` (eager), ``naive-bf16`` (``model.to(bf16)``), ``halfprec-bf16``
  (``halfprec.convert``);
- ``fp32+compile`` and ``naive-bf16+compile``, ``halfprec-bf16+compile``
  (``torch.compile`` with halfprec's CPU recipe, ``COMPILE_RECIPES``: fp32 unfrozen,
  bf16 with inductor freezing; fp32 froze too before 2026-12-01 15:10 UTC);
- ``naive-bf16+autotune`` and ``halfprec-bf16+autotune`` (``mode="max-autotune"`` with
  inductor freezing, ``AUTOTUNE_RECIPES``; skipped where bf16 GEMMs are not native,
  ``autotune_pays``);
- ``onnxruntime-fp32`` (halfprec's fp32 ONNX export on onnxruntime's CPU provider);
- ``openvino-fp32`` and ``openvino-bf16`` (``openvino.convert_model``, compiled with the
  ``f32`` / ``bf16`` inference-precision hint);

and ``halfprec.deploy``'s choice among them, made by deploy's own rule
(``fastest_variant`` then ``with_runtimes``) on the same measurements. Printed per model:
each variant's speedup over eager fp32 with the interquartile range of the per-round
ratios, its cosine against fp32, the bf16 GEMM limit measured in the same run, and the
machine (CPU model, AVX512-BF16 / AMX, OpenVINO's CPU capabilities).

Half dtypes whose matrix products a quick probe finds 3x slower than fp32 are skipped,
never timed (bf16 on a CPU without AVX512-BF16 runs 30-130x slower in torch);
``--time-slow`` times them anyway. OpenVINO's bf16 hint is skipped where its CPU plugin
has no bf16 (it would run f32). Models: ``minilm-b1``, ``minilm-b32`` (real MiniLM weights,
needs HF_HUB_OFFLINE=1 and the weights package) and ``bert-b8`` (BERT-base from its config,
batch 8 x 128).

    HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/cpu_runtimes.py --models minilm-b1,minilm-b32
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import NoReturn

import torch

import halfprec
from halfprec.batch import resize_batch
from halfprec.bench.results import (
    BenchConfig,
    BenchResult,
    fastest_variant,
    paired_speed,
    relative_time,
)
from halfprec.bench.runtime_choice import with_runtimes
from halfprec.bench.spread import variant_speed
from halfprec.errors import HalfprecError
from halfprec.io.specs import load_model
from halfprec.timing import now, spread_text

MODELS = {"minilm-b1": ("builtin:minilm", 1), "minilm-b32": ("builtin:minilm", 32)}
MODELS["bert-b8"] = ("builtin:bert-base", 8)
EAGER = ["fp32", "naive-bf16", "halfprec-bf16"]
COMPILED = [
    "fp32+compile",
    "naive-bf16+compile",
    "naive-bf16+autotune",
    "halfprec-bf16+compile",
    "halfprec-bf16+autotune",
]
RUNTIMES = ["onnxruntime-fp32", "openvino-fp32", "openvino-bf16"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like halfprec's CLI
        self.exit(2, f"cpu_runtimes: error: {message}; see --help\n")


def _models(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in MODELS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown model {', '.join(bad) or repr(text)}; use a comma list of {', '.join(MODELS)}"
        )
    return names


def _cpu() -> str:
    """lscpu's model name and the half-precision flags that decide bf16 speed."""
    flags = open("/proc/cpuinfo").read().split()  # noqa: SIM115 (read once, closed by GC)
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next(
            (ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if "Model name" in ln), "?"
        )
    except OSError:
        model = "?"
    feats = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ("avx512_bf16", "amx_bf16"))
    return f"{model}; {feats}; {torch.get_num_threads()} torch threads"


def _openvino_caps() -> str:
    try:
        import openvino as ov
    except ImportError:
        return "openvino not installed"
    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return f"openvino {ov.__version__.split('-')[0]}, CPU capabilities {', '.join(caps)}"


def _row(result: BenchResult, name: str, chosen: str) -> str:
    r = result.get(name)
    mark = " <- deploy" if name == chosen else ""
    if r.status != "ok":
        return f"  {name:24s} {r.status}: {r.note}"
    cos = r.comparison.worst_cosine if r.comparison and r.comparison.outputs else None
    acc = "" if r.accurate else " OUT OF TOLERANCE"
    speed = variant_speed(result, r)
    text = "1.00x (the reference)" if speed is None else spread_text(speed)
    cosine = "cos 1 (reference)" if cos is None else f"cos {cos:.6f} (1-cos {1 - cos:.1e})"
    comp = f", compile {r.compile_s:.0f} s" if r.compile_s is not None else ""
    return f"  {name:24s} {text}; {cosine}{acc}; median {r.median_s * 1e3:.1f} ms{comp}{mark}"


def _against_best(result: BenchResult, chosen: str) -> str:
    """The choice against the fastest accurate other variant, with the spread of the
    per-round ratio through eager fp32 (each variant was timed in its own pair with it)."""
    rows = [
        r
        for r in result.results
        if r.status == "ok" and r.accurate and r.name != chosen and r.median_s is not None
    ]
    if not rows:
        return ""
    fp32 = result.get("fp32")  # each variant timed in its own pair: rank relative to fp32
    best = min(rows, key=lambda r: relative_time(fp32, r) or float("inf"))
    speed = paired_speed(best, result.get(chosen))
    if speed is None:
        return ""
    return f" ({spread_text(speed)} than the fastest other, {best.name})"


def run_one(label: str, variants: list[str], bench: BenchConfig) -> None:
    spec, size = MODELS[label]
    loaded = load_model(spec)
    batch = resize_batch(loaded.example_inputs[0], size)
    start = now()
    result = halfprec.benchmark(loaded.model, batch, "bf16", bench=bench, variants=variants)
    spent = now() - start
    chosen = with_runtimes(result, fastest_variant(result)).name
    lim = result.limit(torch.bfloat16)
    limit = "not measured" if lim is None else f"{lim.ratio:.3g}x ({lim.method})"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\n{label} ({spec}, batch {size}): bf16 eager GEMM ratio {limit}; run took "
        f"{spent:.0f} s; load average after {load}"
    )
    for name in variants:
        print(_row(result, name, chosen))
    print(f"  deploy's choice on these measurements: {chosen}{_against_best(result, chosen)}")
    for w in result.warnings:
        print(f"  note: {w}")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=_models, default=list(MODELS), help=", ".join(MODELS))
    parser.add_argument("--runs", type=int, default=10, help="timed rounds (default 10)")
    parser.add_argument("--no-compile", action="store_true", help="leave out +compile")
    parser.add_argument("--time-slow", action="store_true", help="time dtypes probed slow")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error(f"--runs {args.runs} gives no spread; use --runs 2 or more")
    variants = EAGER + ([] if args.no_compile else COMPILED) + RUNTIMES
    bench = BenchConfig(
        warmup=2,
        runs=args.runs,
        memory="none",
        max_call_s=60.0,  # BERT-base b8x128 in fp32 takes ~10 s a call on 1 busy core
        max_variant_s=60.0,
        skip_slower_than=None if args.time_slow else 3.0,
        limit_budget_s=10.0,
    )
    print(f"machine: {_cpu()}\n{_openvino_caps()}; torch {torch.__version__}")
    for label in args.models:
        try:
            run_one(label, variants, bench)
        except HalfprecError as exc:  # e.g. the MiniLM weights package is missing
            print(f"\n{label}: not run: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
