"""Training-step time and peak memory of fp32, AMP, pure bf16 and bf16 weights, BERT-small.

    PYTHONPATH=src python benchmarks/train_step.py [--device cpu|cuda] [--steps 3] [--warmup 1]
        [--variants fp32,bf16,fp16,...] [--no-memory]

The model is ``BertForSequenceClassification`` built from a BERT-small config (4 layers,
hidden 512, 8 heads, random weights: nothing is downloaded), batch 8 x 64 tokens. A step
is forward + loss, backward and an AdamW step. Variants:

- ``fp32``: fp32 weights, ``torch.optim.AdamW`` (torch's default implementation);
- ``bf16`` / ``fp16``: AMP through ``halfprec.train.MixedPrecision`` (autocast, checked
  step), fp32 weights, the same AdamW;
- ``bf16-fused``: the same as ``bf16`` with ``AdamW(fused=True)``;
- ``pure-bf16``: ``model.to(bf16)`` and plain AdamW, no autocast, no checks;
- ``bf16-weights``: ``model.to(bf16)``, ``StochasticAdamW``, ``MixedPrecision("bf16")``;
- ``bf16-masters`` / ``fp16-masters``: master-weight mode, ``MixedPrecision(...)`` with
  ``use_master_weights``: half parameters, fp32 masters updated by ``AdamW(fused=True)``.

Times are medians over ``--steps`` steps after warm-up, the variants interleaved round by
round in one process so they see the same machine load. Peak memory is measured in a fresh
process per variant: peak RSS on CPU, peak allocated memory on an accelerator.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable

import torch
from torch import nn

VARIANTS = (
    "fp32",
    "bf16",
    "fp16",
    "bf16-fused",
    "pure-bf16",
    "bf16-weights",
    "bf16-masters",
    "fp16-masters",
)
BATCH, SEQ = 8, 64


def build(
    device: torch.device, variant: str = "fp32"
) -> tuple[nn.Module, torch.optim.Optimizer, dict[str, torch.Tensor]]:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        intermediate_size=2048,
        num_labels=2,
    )
    model = BertForSequenceClassification(config).to(device)
    if variant in ("pure-bf16", "bf16-weights"):
        model = model.to(torch.bfloat16)
    optimizer: torch.optim.Optimizer
    if variant == "bf16-weights":
        from halfprec.train import StochasticAdamW

        optimizer = StochasticAdamW(model.parameters(), lr=1e-4)
    else:
        fused = variant == "bf16-fused" or variant.endswith("-masters")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    gen = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(0, config.vocab_size, (BATCH, SEQ), generator=gen),
        "labels": torch.randint(0, 2, (BATCH,), generator=gen),
    }
    return model, optimizer, {k: v.to(device) for k, v in batch.items()}


def make_step(variant: str, device: torch.device) -> Callable[[], None]:
    from halfprec.train import MixedPrecision

    model, optimizer, batch = build(device, variant)
    if variant in ("fp32", "pure-bf16"):

        def step() -> None:
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step
    mp = MixedPrecision(variant.split("-")[0], device)
    if variant.endswith("-masters"):
        mp.use_master_weights(model, optimizer)

    def amp_step() -> None:
        with mp.autocast():
            loss = model(**batch).loss
        mp.backward(loss)
        mp.step(optimizer)

    return amp_step


def _sync(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def time_variants(
    device: torch.device, steps: int, warmup: int, variants: tuple[str, ...]
) -> dict[str, float]:
    from halfprec.timing import now

    fns = {v: make_step(v, device) for v in variants}
    times: dict[str, list[float]] = {v: [] for v in variants}
    for round_ in range(warmup + steps):
        for variant, fn in fns.items():
            _sync(device)
            start = now(device)
            fn()
            _sync(device)
            if round_ >= warmup:
                times[variant].append(now(device) - start)
    return {v: statistics.median(t) for v, t in times.items()}


def _rss_now() -> float:
    with open("/proc/self/statm") as statm:
        return float(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _RssSampler:
    """Highest RSS seen while running, sampled every millisecond in a thread."""

    def __init__(self) -> None:
        self.peak = _rss_now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, _rss_now())

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_now())


def peak_memory(variant: str, device: torch.device, steps: int) -> float:
    """Run in a fresh process: peak bytes of weights, gradients, optimizer state and
    activations while training. On CPU: the highest RSS during the training steps minus
    the RSS before the model was built (after all imports)."""
    import transformers  # noqa: F401  (imported before the baseline is taken)

    baseline = _rss_now()
    step = make_step(variant, device)
    if device.type != "cpu":
        torch.accelerator.reset_peak_memory_stats(device)
        for _ in range(steps):
            step()
        _sync(device)
        return float(torch.accelerator.max_memory_allocated(device))
    with _RssSampler() as sampler:
        for _ in range(steps):
            step()
    return sampler.peak - baseline


def _memory_in_fresh_process(variant: str, device: str) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--device", device, "--memory-of", variant],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ),
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--no-memory", action="store_true", help="time only")
    parser.add_argument("--memory-of", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    variants = tuple(args.variants.split(","))
    if "fp32" not in variants or not set(variants) <= set(VARIANTS):
        parser.error(f"--variants: fp32 and any of {', '.join(VARIANTS)}")
    device = torch.device(args.device)
    if args.memory_of:
        print(json.dumps({"peak_bytes": peak_memory(args.memory_of, device, args.warmup + 1)}))
        return
    from halfprec.dtypes import device_support

    print(f"device: {device_support(device).name}; BERT-small, batch {BATCH} x {SEQ} tokens")
    medians = time_variants(device, args.steps, args.warmup, variants)
    memory = (
        {} if args.no_memory else {v: _memory_in_fresh_process(v, args.device) for v in variants}
    )
    what = "peak RSS growth" if device.type == "cpu" else "peak allocated"
    print(f"| variant | step time (median) | speed vs fp32 | {what} | vs fp32 |")
    print("|---|---|---|---|---|")
    for v in variants:
        mem = (
            f"{memory[v] / 2**20:.0f} MiB | {memory[v] / memory['fp32']:.2f}x"
            if memory
            else "- | -"
        )
        print(f"| {v} | {medians[v] * 1000:.0f} ms | {medians['fp32'] / medians[v]:.2f}x | {mem} |")


if __name__ == "__main__":
    main()
