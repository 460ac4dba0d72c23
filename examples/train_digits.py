"""Train a classifier on scikit-learn's bundled digits data set in fp32, bf16 AMP, fp16 AMP
and bf16 weights (``StochasticAdamW``).

    PYTHONPATH=src python examples/train_digits.py

prints the test accuracy of each, plus the gradient-underflow case: with the loss weighted
by 2**-20 (as a small term of a multi-task loss would be), fp16 without loss scaling
gets all-zero gradients and stops learning, while halfprec's scaled fp16 still learns.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
from torch import nn

from halfprec.train import MixedPrecision, StochasticAdamW

UNDERFLOW_WEIGHT = 2.0**-20
BATCH = 64


@dataclass(frozen=True)
class DigitsResult:
    precision: str
    accuracy: float
    skipped_steps: int
    weights_changed: bool


def digits_split(seed: int = 0) -> tuple[torch.Tensor, ...]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=seed, stratify=y
    )
    return x_train, x_test, y_train, y_test


def train_digits(
    precision: str,
    *,
    scale_loss: bool = True,
    loss_weight: float = 1.0,
    epochs: int = 25,
    seed: int = 0,
) -> DigitsResult:
    """Train a 64-128-10 MLP. ``precision`` is fp32, bf16 or fp16 (AMP: fp32 weights), or
    bf16-weights (bf16 weights, gradients and moments; ``StochasticAdamW`` without weight
    decay is Adam). ``scale_loss=False`` runs plain ``torch.autocast`` +
    ``loss.backward()`` (no halfprec) as the baseline."""
    x_train, x_test, y_train, y_test = digits_split()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer: torch.optim.Optimizer
    if precision == "bf16-weights":
        model = model.to(torch.bfloat16)
        optimizer = StochasticAdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        precision, x_test = "bf16", x_test.to(torch.bfloat16)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    initial = [p.detach().clone() for p in model.parameters()]
    half = precision != "fp32"
    mp = MixedPrecision(precision, "cpu") if half and scale_loss else None
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(x_train), generator=gen)
        for start in range(0, len(order) - BATCH + 1, BATCH):  # full batches only
            pick = order[start : start + BATCH]
            if mp is not None:
                with mp.autocast():
                    loss = nn.functional.cross_entropy(model(x_train[pick]), y_train[pick])
                mp.backward(loss * loss_weight)
                mp.step(optimizer)
                continue
            dtype = torch.float16 if precision == "fp16" else torch.bfloat16
            with torch.autocast("cpu", dtype=dtype, enabled=half):
                loss = nn.functional.cross_entropy(model(x_train[pick]), y_train[pick])
            (loss * loss_weight).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        predicted = model(x_test).argmax(dim=1)
    changed = any(not torch.equal(p, q) for p, q in zip(model.parameters(), initial, strict=True))
    weights = " weights" if x_test.dtype == torch.bfloat16 else ""
    return DigitsResult(
        precision=precision + weights + ("" if scale_loss or not half else " (no loss scaling)"),
        accuracy=float((predicted == y_test).float().mean()),
        skipped_steps=mp.steps_skipped if mp is not None else 0,
        weights_changed=changed,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=25)
    args = parser.parse_args()
    print(f"{'run':<44} {'test accuracy':>13} {'skipped':>8}")
    for precision in ("fp32", "bf16", "fp16", "bf16-weights"):
        result = train_digits(precision, epochs=args.epochs)
        print(f"{result.precision:<44} {result.accuracy:>13.4f} {result.skipped_steps:>8}")
    for scale in (False, True):
        result = train_digits(
            "fp16", scale_loss=scale, loss_weight=UNDERFLOW_WEIGHT, epochs=args.epochs
        )
        label = f"{result.precision}, loss weight 2**-20"
        print(f"{label:<44} {result.accuracy:>13.4f} {result.skipped_steps:>8}")


if __name__ == "__main__":
    main()
