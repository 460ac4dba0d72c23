"""Final training loss of master-weight mode against fp32, bf16 autocast and pure bf16.

    PYTHONPATH=src python benchmarks/master_loss.py [--seeds 3] [--digits-epochs 10]
        [--bert-steps 40] [--bert-layers 4] [--bert-hidden 512]

Two tasks, each trained from the same seeded start by every variant:

- digits: scikit-learn's digits, a 64-128-10 MLP, Adam lr 3e-3, batch 64; the final loss
  is the mean training loss of the last epoch;
- BERT: ``BertForSequenceClassification`` (random weights; BERT-small by default), AdamW
  lr 1e-4, batch 8 x 64 tokens of a synthetic task (the label is the first token's
  parity, fresh batches each step); the final loss is the mean over the last 10 steps.

Variants: ``fp32``; ``autocast`` (``MixedPrecision("bf16")``, fp32 weights); ``masters``
(the same with ``use_master_weights``: bf16 parameters, fp32 masters, fused AdamW);
``pure-bf16`` (``model.to(bf16)``, plain Adam/AdamW). The verdict per task (see
:func:`verdict`): master-weight mode's mean per-seed difference from fp32 lies within the
interval spanned by 0 and autocast's per-seed differences from fp32; pure bf16 is judged
the same way, to show whether the task can tell the precisions apart at all.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Iterator

import torch
from torch import nn

from halfprec.train import MixedPrecision

VARIANTS = ("fp32", "autocast", "masters", "pure-bf16")
Batches = Callable[[int], Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]]


def _train(
    model: nn.Module,
    variant: str,
    make_optimizer: Callable[[nn.Module, bool], torch.optim.Optimizer],
    batches: Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]],
    loss_fn: Callable[[nn.Module, dict[str, torch.Tensor], torch.Tensor], torch.Tensor],
) -> list[float]:
    if variant == "pure-bf16":
        model = model.to(torch.bfloat16)
    optimizer = make_optimizer(model, variant == "masters")
    mp = MixedPrecision("bf16", "cpu") if variant in ("autocast", "masters") else None
    if mp is not None and variant == "masters":
        mp.use_master_weights(model, optimizer)
    losses = []
    for inputs, target in batches:
        if mp is None:
            loss = loss_fn(model, inputs, target)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            with mp.autocast():
                loss = loss_fn(model, inputs, target)
            mp.backward(loss)
            mp.step(optimizer)
        losses.append(float(loss.detach().float()))
    return losses


def digits_loss(variant: str, seed: int, epochs: int) -> float:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.long)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    gen = torch.Generator().manual_seed(seed)
    per_epoch = len(x) // 64

    def batches() -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=gen)
            for start in range(0, per_epoch * 64, 64):
                pick = order[start : start + 64]
                yield {"x": x[pick]}, y[pick]

    def loss_fn(m: nn.Module, inputs: dict[str, torch.Tensor], t: torch.Tensor) -> torch.Tensor:
        out = m(inputs["x"].to(next(m.parameters()).dtype))
        return nn.functional.cross_entropy(out.float(), t)

    def adam(m: nn.Module, fused: bool) -> torch.optim.Optimizer:
        return torch.optim.Adam(m.parameters(), lr=3e-3, fused=fused or None)

    losses = _train(model, variant, adam, batches(), loss_fn)
    return statistics.fmean(losses[-per_epoch:])


def bert_loss(variant: str, seed: int, steps: int, layers: int, hidden: int) -> float:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=4 * hidden,
        num_labels=2,  # type: ignore[call-arg]
    )
    model = BertForSequenceClassification(config)
    gen = torch.Generator().manual_seed(1000 + seed)

    def batches() -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        for _ in range(steps):
            ids = torch.randint(0, config.vocab_size, (8, 64), generator=gen)
            yield {"input_ids": ids}, ids[:, 0] % 2

    def loss_fn(m: nn.Module, inputs: dict[str, torch.Tensor], t: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(m(**inputs).logits.float(), t)

    def adamw(m: nn.Module, fused: bool) -> torch.optim.Optimizer:
        return torch.optim.AdamW(m.parameters(), lr=1e-4, fused=fused or None)

    losses = _train(model, variant, adamw, batches(), loss_fn)
    return statistics.fmean(losses[-10:])


def verdict(finals: dict[str, list[float]]) -> str:
    """Whether master-weight mode's final loss lies within the fp32-vs-autocast spread.

    The seeds change the start and the data, which moves the final loss far more than the
    precision does (the seed noise), so losses are compared seed by seed: the precision
    effect of a variant is its per-seed difference from fp32, ``loss(v, s) - loss(fp32, s)``.
    The fp32-vs-autocast spread is the interval spanned by 0 (fp32 itself) and autocast's
    per-seed differences; a variant is within it when its mean difference over the seeds
    is. Pure bf16 is judged by the same rule: when it is within too, the task cannot tell
    the precisions apart and the verdict says so. For context, the seed noise: the range
    of fp32's and autocast's final losses over the seeds.
    """
    effects = {v: [a - b for a, b in zip(finals[v], finals["fp32"], strict=True)] for v in finals}
    low, high = min(0.0, *effects["autocast"]), max(0.0, *effects["autocast"])

    def judged(variant: str) -> tuple[float, bool]:
        mean = statistics.fmean(effects[variant])
        return mean, low <= mean <= high

    masters, within = judged("masters")
    pure, pure_within = judged("pure-bf16")
    noise = finals["fp32"] + finals["autocast"]
    power = (
        "pure bf16 is outside it, so the task tells the precisions apart"
        if not pure_within
        else "pure bf16 is within it too: this task cannot tell the precisions apart"
    )
    return (
        f"fp32-vs-autocast spread of the per-seed difference from fp32: [{low:+.7f}, "
        f"{high:+.7f}]; masters' mean difference {masters:+.7f}: "
        f"{'WITHIN' if within else 'OUTSIDE'}; pure bf16's {pure:+.7f}; {power}. "
        f"(Seed noise: fp32 and autocast final losses span {max(noise) - min(noise):.7f}.)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--digits-epochs", type=int, default=10)
    parser.add_argument("--bert-steps", type=int, default=40)
    parser.add_argument("--bert-layers", type=int, default=4)
    parser.add_argument("--bert-hidden", type=int, default=512)
    parser.add_argument("--tasks", default="digits,bert", help="digits, bert or both")
    args = parser.parse_args()
    tasks: dict[str, Callable[[str, int], float]] = {
        "digits": lambda v, s: digits_loss(v, s, args.digits_epochs),
        f"BERT {args.bert_layers}x{args.bert_hidden}": lambda v, s: bert_loss(
            v, s, args.bert_steps, args.bert_layers, args.bert_hidden
        ),
    }
    wanted = set(args.tasks.split(","))
    for task, run in tasks.items():
        if task.split()[0].lower() not in wanted:
            continue
        finals = {v: [run(v, seed) for seed in range(args.seeds)] for v in VARIANTS}
        print(f"\n{task}: final loss per seed")
        print("| variant | " + " | ".join(f"seed {s}" for s in range(args.seeds)) + " | mean |")
        print("|---|" + "---|" * (args.seeds + 1))
        for v, values in finals.items():
            cells = " | ".join(f"{x:.7f}" for x in values)
            print(f"| {v} | {cells} | {statistics.fmean(values):.7f} |")
        print(verdict(finals), flush=True)


if __name__ == "__main__":
    main()
