"""Cost and island size of ``diagnose`` and ``tune`` on the hazard models and the zoo.

For each model: the culprit ``diagnose`` names (naive fp16 copy), the fp32 islands ``tune``
picks for fp16, the share of parameters they keep in fp32 (default norm islands included),
the forward passes tune spent, and the time of one diagnosis relative to one plain forward
pass in fp32 and of the tuned fp16 model (medians, timed in the same run; a naive fp16
copy of a hazard model often cannot run at all).

    PYTHONPATH=src python benchmarks/diagnose_zoo.py                 # everything
    PYTHONPATH=src python benchmarks/diagnose_zoo.py --only hazards
    PYTHONPATH=src python benchmarks/diagnose_zoo.py --only zoo --plots docs/

BERT-base and GPT-2 run on a short input (``--seq``, ``--batch``): fp16 matmuls are slow on
CPUs without AVX512-FP16/AMX. Rerun on a quiet machine: timings are wall-clock medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testbed/

import torch  # noqa: E402
from torch import nn  # noqa: E402

from halfprec.batch import call  # noqa: E402
from halfprec.diagnose import diagnose  # noqa: E402
from halfprec.io.specs import load_model  # noqa: E402
from halfprec.io.zoo import token_batch  # noqa: E402
from halfprec.timing import measure, now  # noqa: E402
from halfprec.tune import tune  # noqa: E402


def _timings(
    model: nn.Module, half: nn.Module | None, batch: Any, rounds: int
) -> tuple[float, float, float, Any]:
    """Medians of a plain fp32 forward, a half forward and one diagnosis, interleaved round by
    round so that load changes on a shared machine hit all three alike."""
    t32, t16, tdiag, diag = [], [], [], None
    with torch.inference_mode():
        call(model, batch)
        if half is not None:
            call(half, batch)
        for _ in range(rounds):
            t32.append(measure(lambda: call(model, batch), warmup=0, runs=1).median)
            if half is not None:
                t16.append(measure(lambda: call(half, batch), warmup=0, runs=1).median)
            start = now()
            diag = diagnose(model, [batch], "fp16")
            tdiag.append(now() - start)
    med = statistics.median
    return med(t32), med(t16) if t16 else float("nan"), med(tdiag), diag


def row(
    name: str, model: nn.Module, batches: list[Any], runs: int, plots: Path | None
) -> dict[str, Any]:
    first = batches[0]
    start = now()
    result = tune(model, batches, "fp16")
    t_tune = now() - start
    t32, t16, t_diag, diag = _timings(model, result.model, first, runs)
    if plots is not None:
        from halfprec.report.diagnose import plot_diagnosis

        plots.mkdir(parents=True, exist_ok=True)
        plot_diagnosis(diag, plots / f"diagnose_{name}_fp16.png", title=f"{name}: fp16 vs fp32")
    return {
        "model": name,
        "culprit": diag.culprit if diag.divergence is not None else "-",
        "islands": ", ".join(result.keep_fp32) or "-",
        "passed": result.passed,
        "share": result.report.fp32_share,
        "passes": result.report.passes,
        "tune_s": t_tune,
        "diag_s": t_diag,
        "fwd32_ms": 1e3 * t32,
        "fwd16_ms": 1e3 * t16,
    }


def _short_tokens(model: nn.Module, batch: int, seq: int) -> list[Any]:
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 30522))
    return [token_batch(vocab, batch, seq, seed=s) for s in range(2)]


def zoo_models(batch: int, seq: int) -> list[tuple[str, nn.Module, list[Any]]]:
    out = []
    for spec in ("builtin:minilm", "builtin:bert-base", "builtin:gpt2", "builtin:cnn"):
        loaded = load_model(spec)
        name = spec.removeprefix("builtin:")
        batches = loaded.example_inputs
        if name in ("bert-base", "gpt2"):
            batches = _short_tokens(loaded.model, batch, seq)
        out.append((name, loaded.model, batches))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("hazards", "zoo"), default=None)
    parser.add_argument("--runs", type=int, default=5, help="timed rounds (medians)")
    parser.add_argument("--batch", type=int, default=2, help="batch size for bert-base/gpt2")
    parser.add_argument("--seq", type=int, default=32, help="sequence length for bert-base/gpt2")
    parser.add_argument("--plots", type=Path, default=None, help="write zoo plots here")
    args = parser.parse_args()
    rows = []
    if args.only in (None, "hazards"):
        from testbed.hazards import HAZARDS

        for name, hazard in HAZARDS.items():
            model, batches = hazard.build()
            rows.append(row(name, model, batches, args.runs, None))
            print(f"done {name}", file=sys.stderr)
    if args.only in (None, "zoo"):
        for name, model, batches in zoo_models(args.batch, args.seq):
            rows.append(row(name, model, batches, args.runs, args.plots))
            print(f"done {name}", file=sys.stderr)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        "| model | culprit (naive fp16) | tune: fp32 islands | fp32 share | passes | tune s "
        "| diagnose s | fwd fp32 ms | fwd tuned fp16 ms | diagnose / fwd fp32 "
        "| diagnose / fwd fp16 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        islands = r["islands"] if r["passed"] else "NOT FOUND"
        print(
            f"| {r['model']} | {r['culprit']} | {islands} | {100 * r['share']:.2f}% "
            f"| {r['passes']} | {r['tune_s']:.1f} | {r['diag_s']:.2f} | {r['fwd32_ms']:.1f} "
            f"| {r['fwd16_ms']:.1f} | {r['diag_s'] * 1e3 / r['fwd32_ms']:.1f}x "
            f"| {r['diag_s'] * 1e3 / r['fwd16_ms']:.1f}x |"
        )


if __name__ == "__main__":
    main()
