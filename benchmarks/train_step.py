"""Training-step time and peak memory of fp32, AMP, pure bf16 and bf16 weights, BERT-small.

    PYTHONPATH=src python benchmarks/train_step.py [--device cpu|cuda] [--steps 3] [--warmup 1]
        [--variants fp32,bf16,fp16,...] [--no-memory] [--layers 4] [--hidden 512]

The model is ``BertForSequenceClassification`` built from a BERT-small config (4 layers,
hidden 512, 8 heads, random weights: nothing is downloaded; ``--layers``/``--hidden`` give a
smaller proxy), batch 8 x 64 tokens. A step is forward + loss, backward and an AdamW step.
Variants:

- ``fp32``: fp32 weights, ``torch.optim.AdamW`` (torch's default implementation);
- ``bf16`` / ``fp16``: AMP through ``halfprec.train.MixedPrecision`` (autocast, checked
  step), fp32 weights, the same AdamW;
- ``bf16-fused``: the same as ``bf16`` with ``AdamW(fused=True)``;
- ``pure-bf16``: ``model.to(bf16)`` and plain AdamW, no autocast, no checks;
- ``bf16-weights``: ``model.to(bf16)``, ``StochasticAdamW``, ``MixedPrecision("bf16")``;
- ``bf16-masters`` / ``fp16-masters``: master-weight mode, ``MixedPrecision(...)`` with
  ``use_master_weights``: half parameters, fp32 masters updated by ``AdamW(fused=True)``;
- ``bf16-compiled-step``: the whole AMP step (autocast forward and loss, backward, AdamW
  step) in one ``torch.compile`` function, with compiled autograd so that the backward,
  gradient accumulation included, is compiled too; fp32 weights, no step checks. The
  first (warm-up) step compiles; ``--warmup`` of at least 2 keeps recompiles out;
- ``bf16-accum4``: ``MixedPrecision("bf16")`` with ``accumulation_steps=4``, so a step is 4
  micro-batches (4x the work of the other variants' steps), each in its own
  ``mp.autocast()`` region, which casts every weight again; ``bf16-accum4-cached``: the
  same with autocast's cast cache kept from the first micro-batch to the step (one level
  of autocast's nesting count held meanwhile), so each weight is cast once per step.
  Compare these two with each other.

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
    "bf16-compiled-step",
    "bf16-accum4",
    "bf16-accum4-cached",
)
ACCUMULATION = 4
BATCH, SEQ = 8, 64


def build(
    device: torch.device, variant: str = "fp32", layers: int = 4, hidden: int = 512
) -> tuple[nn.Module, torch.optim.Optimizer, dict[str, torch.Tensor]]:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=4 * hidden,
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


def make_step(variant: str, device: torch.device, size: tuple[int, int]) -> Callable[[], None]:
    from halfprec.train import MixedPrecision, TrainConfig

    model, optimizer, batch = build(device, variant, *size)
    if variant == "bf16-compiled-step":
        return compiled_step(model, optimizer, batch, device)
    if variant in ("fp32", "pure-bf16"):

        def step() -> None:
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step
    accumulate = variant.startswith("bf16-accum4")
    config = TrainConfig(accumulation_steps=ACCUMULATION if accumulate else 1)
    mp = MixedPrecision(variant.split("-")[0], device, config)
    if variant.endswith("-masters"):
        mp.use_master_weights(model, optimizer)
    cached = variant.endswith("-cached")

    def amp_step() -> None:
        if cached:
            torch.autocast_increment_nesting()  # region exits keep the cache until the step
        for _ in range(config.accumulation_steps):
            with mp.autocast():
                loss = model(**batch).loss
            mp.backward(loss)
        if cached and torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        mp.step(optimizer)

    return amp_step


def compiled_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    device: torch.device,
) -> Callable[[], None]:
    """torch.amp's step, forward to optimizer, compiled as one function."""
    torch._dynamo.config.compiled_autograd = True  # backward under torch.compile compiled too

    @torch.compile
    def forward_backward_update() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()

    def step() -> None:
        forward_backward_update()
        optimizer.zero_grad(set_to_none=True)  # dynamo does not trace zero_grad

    return step


def _sync(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def time_variants(
    device: torch.device,
    steps: int,
    warmup: int,
    variants: tuple[str, ...],
    size: tuple[int, int] = (4, 512),
) -> dict[str, float]:
    from halfprec.timing import now

    fns = {v: make_step(v, device, size) for v in variants}
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


def peak_memory(variant: str, device: torch.device, steps: int, size: tuple[int, int]) -> float:
    """Run in a fresh process: peak bytes of weights, gradients, optimizer state and
    activations while training. On CPU: the highest RSS during the training steps minus
    the RSS before the model was built (after all imports)."""
    import transformers  # noqa: F401  (imported before the baseline is taken)

    baseline = _rss_now()
    step = make_step(variant, device, size)
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


def _memory_in_fresh_process(variant: str, device: str, size: tuple[int, int]) -> float:
    layers, hidden = (str(n) for n in size)
    argv = ["--device", device, "--memory-of", variant, "--layers", layers, "--hidden", hidden]
    out = subprocess.run(
        [sys.executable, __file__, *argv],
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
    parser.add_argument("--layers", type=int, default=4, help="encoder layers (BERT-small: 4)")
    parser.add_argument("--hidden", type=int, default=512, help="hidden size (BERT-small: 512)")
    parser.add_argument("--memory-of", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    variants = tuple(args.variants.split(","))
    if "fp32" not in variants or not set(variants) <= set(VARIANTS):
        parser.error(f"--variants: fp32 and any of {', '.join(VARIANTS)}")
    device = torch.device(args.device)
    size = (args.layers, args.hidden)
    if args.memory_of:
        peak = peak_memory(args.memory_of, device, args.warmup + 1, size)
        print(json.dumps({"peak_bytes": peak}))
        return
    from halfprec.dtypes import device_support

    model = "BERT-small" if size == (4, 512) else f"BERT {args.layers} layers, hidden {args.hidden}"
    print(f"device: {device_support(device).name}; {model}, batch {BATCH} x {SEQ} tokens")
    medians = time_variants(device, args.steps, args.warmup, variants, size)
    memory = (
        {}
        if args.no_memory
        else {v: _memory_in_fresh_process(v, args.device, size) for v in variants}
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
