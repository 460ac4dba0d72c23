"""Training memory and step time: fp32, bf16 AMP, bf16 weights, and compiled AMP, on a small
BERT; then the loss curves of a short fine-tune.

    PYTHONPATH=src python3 benchmarks/train_memory.py            # memory/time, then curves
    PYTHONPATH=src python3 benchmarks/train_memory.py --compile  # also torch.compile + AMP

The model is ``BertForSequenceClassification`` from a config (random weights; hidden 128,
2 layers, 2 heads, MLP 512, vocabulary 8192), trained with AdamW (lr 1e-4) on a synthetic
two-class task: random tokens, with the label's marker token first and at a quarter of the
other positions.

**Memory and time**, each (mode, batch) in a fresh process:

- ``fp32``: fp32 weights, ``torch.optim.AdamW``;
- ``amp``: fp32 weights, ``MixedPrecision("bf16")`` (autocast), ``torch.optim.AdamW``;
- ``bf16-weights``: ``model.to(torch.bfloat16)``, ``StochasticAdamW``, ``MixedPrecision("bf16")``;
- ``amp+compile`` (with ``--compile``): ``amp`` with ``torch.compile(model)``.

At batch 2 x 32 (weights, gradients and Adam state dominate) and 16 x 128 (activations
dominate). Each child first runs one step of a tiny model (imports, kernels), then builds
the model. Printed: the peak of the training steps (``VmHWM``, its counter reset after the
model is built, minus ``VmRSS`` before it was built: model, gradients, optimizer state,
activations and temporaries), ``training_bytes`` (parameters, gradients, optimizer state:
exact), the first step's seconds and the median of the others.

**Loss curves**: ``--curve-steps`` steps at batch 8 x 32, the mean loss of each fifth of the
run, for fp32 (seeds 0 and 1: the second shows how far fp32 itself moves with another seed),
bf16 weights, and plain bf16 (``torch.optim.AdamW`` on bf16 weights, round-to-nearest).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from memory import _kib  # benchmarks/memory.py: a field of /proc/self/status

MB = 2**20
MODES = ("fp32", "amp", "bf16-weights")


def _batch(rows: int, length: int, step: int) -> dict[str, Any]:
    """Random tokens; a sequence of label ``y`` starts with marker token ``1 + y`` (where
    BERT pools) and holds it at a quarter of the other positions too."""
    import torch

    gen = torch.Generator().manual_seed(1000 + step)
    labels = torch.randint(0, 2, (rows,), generator=gen)
    tokens = torch.randint(3, 8192, (rows, length), generator=gen)
    marked = torch.rand(rows, length, generator=gen) < 0.25
    marked[:, 0] = True
    tokens = torch.where(marked, 1 + labels[:, None], tokens)
    return {"input_ids": tokens, "labels": labels}


def _setup(mode: str, seed: int, width: int = 128) -> tuple[Any, Any, Any, Any]:
    """(model, the module to call, optimizer, MixedPrecision or None) for ``mode``; the
    model is built in fp32 (the same weights for every mode of a seed), then cast."""
    import torch
    import transformers as tf

    from halfprec.train import MixedPrecision, StochasticAdamW

    config = tf.BertConfig(
        vocab_size=8192, hidden_size=width, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=4 * width, max_position_embeddings=128, num_labels=2,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = tf.BertForSequenceClassification(config).train()
    mp = None if mode == "fp32" else MixedPrecision("bf16")
    if mode in ("bf16-weights", "plain-bf16"):
        model = model.to(torch.bfloat16)
    cls = StochasticAdamW if mode == "bf16-weights" else torch.optim.AdamW
    optimizer = cls(model.parameters(), lr=1e-4)
    run = torch.compile(model) if mode.endswith("+compile") else model
    return model, run, optimizer, mp


def _step(run: Any, optimizer: Any, mp: Any, batch: dict[str, Any]) -> float:
    if mp is None:
        loss = run(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    else:
        with mp.autocast():
            loss = run(**batch).loss
        mp.backward(loss)
        mp.step(optimizer)
    return float(loss.detach())


def child(mode: str, rows: int, length: int, steps: int) -> None:
    import ctypes
    import gc

    from halfprec.timing import now
    from halfprec.train import training_bytes

    batches = [_batch(rows, length, i) for i in range(steps)]
    _step(*_setup(mode.removesuffix("+compile"), 0, width=8)[1:], _batch(2, 8, 0))  # imports
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _kib("VmRSS")
    model, run, optimizer, mp = _setup(mode, 0)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # the fp32 copy a bf16 model was cast from
    Path("/proc/self/clear_refs").write_text("5")  # the peak counter starts from here
    times = []
    for batch in batches:
        start = now()
        _step(run, optimizer, mp, batch)
        times.append(now() - start)
    peak = _kib("VmHWM") - before
    held = training_bytes(model, optimizer)["total"]  # gradients were cleared: count them
    held += sum(p.numel() * p.element_size() for p in model.parameters())
    print(json.dumps({"peak": peak, "held": held, "first": times[0], "steps": times[1:]}))


def _run(*args: str) -> dict[str, Any]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [sys.executable, __file__, "child", *args], capture_output=True, text=True, env=env
    )
    if proc.returncode:
        raise SystemExit(f"child {args}: {proc.stderr.strip().splitlines()[-3:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def memory_and_time(modes: list[str], steps: int, batches: list[tuple[int, ...]]) -> None:
    for rows, length in batches:
        results = {mode: _run(mode, str(rows), str(length), str(steps)) for mode in modes}
        base = results["fp32"]
        print(f"batch {rows} x {length}, {steps} steps (the first apart):")
        for mode, r in results.items():
            step = statistics.median(r["steps"])
            print(
                f"  {mode:13s} peak +{r['peak'] / MB:6.1f} MiB ({r['peak'] / base['peak']:.2f}x "
                f"fp32), weights+grads+state {r['held'] / MB:5.1f} MiB "
                f"({r['held'] / base['held']:.2f}x), first step {r['first']:6.2f} s, then "
                f"{step:.3f} s ({step / statistics.median(base['steps']):.2f}x fp32)"
            )


def curves(steps: int) -> None:
    runs = [("fp32", 0), ("fp32", 1), ("bf16-weights", 0), ("plain-bf16", 0)]
    print(f"loss, batch 8 x 32, mean of each fifth of {steps} steps:")
    for mode, seed in runs:
        _, run, optimizer, mp = _setup(mode, seed)
        losses = [_step(run, optimizer, mp, _batch(8, 32, i)) for i in range(steps)]
        fifth = max(1, steps // 5)
        means = [statistics.mean(losses[i : i + fifth]) for i in range(0, steps, fifth)]
        print(f"  {mode:13s} seed {seed}: " + " ".join(f"{m:.4f}" for m in means))


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        mode, rows, length, steps = sys.argv[2:6]
        return child(mode, int(rows), int(length), int(steps))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="steps per memory/time run")
    parser.add_argument("--curve-steps", type=int, default=40)
    parser.add_argument("--compile", action="store_true", help="also amp+compile")
    parser.add_argument("--only", choices=("memory", "curves"))
    parser.add_argument("--batches", default="2x32,16x128", help="ROWSxLENGTH,...")
    args = parser.parse_args()
    modes = [*MODES, "amp+compile"] if args.compile else list(MODES)
    batches = [tuple(int(n) for n in b.split("x")) for b in args.batches.split(",")]
    if args.only != "curves":
        memory_and_time(modes, args.steps, batches)
    if args.only != "memory":
        curves(args.curve_steps)
    return None


if __name__ == "__main__":
    main()
