"""What ``mp.watch(model)`` costs a bf16 training step: no watch, names only, and activations.

    PYTHONPATH=src python benchmarks/archive/watch_overhead.py [--steps 20] [--device cpu|cuda]

One small GPT-2 (2 layers, width 128, 64 tokens x 8 rows), three copies with the same
weights, trained with ``MixedPrecision("bf16")`` (AdamW). The copies differ only in the
watch: none; ``watch(model, activations=False)`` (post-accumulate-grad hooks, for the
first bad gradient); ``watch(model)`` (those plus a forward hook on every module that
reduces its output to one inf/NaN flag). Steps are interleaved round by round in one
process; each variant's median step time is printed with its ratio to no watch.
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
from torch import nn

from halfprec.timing import now, synchronize
from halfprec.train import MixedPrecision


def _model() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=64, vocab_size=512)
    return GPT2LMHeadModel(config).train()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    base = _model().to(device)
    ids = torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(1)).to(device)
    runs = {}
    for name in ("no watch", "names only", "names + activations"):
        model = copy.deepcopy(base)
        mp = MixedPrecision("bf16", device=device)
        if name != "no watch":
            mp.watch(model, activations=name == "names + activations")
        runs[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4), mp, [])

    for step in range(args.steps + 2):  # the first 2 rounds warm up
        for model, optimizer, mp, times in runs.values():
            synchronize(device)
            start = now(device)
            with mp.autocast():
                loss = model(input_ids=ids, labels=ids).loss
            mp.backward(loss)
            mp.step(optimizer)
            synchronize(device)
            if step >= 2:
                times.append(now(device) - start)
    baseline = statistics.median(runs["no watch"][3])
    for name, (*_, times) in runs.items():
        median = statistics.median(times)
        print(f"{name:22s} {median * 1e3:8.1f} ms/step  {median / baseline:5.2f}x")


if __name__ == "__main__":
    main()
