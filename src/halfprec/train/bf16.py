"""Training with bf16 weights: about half the memory of fp32 for weights, gradients and
Adam state, with fp32's loss curve.

Plain bf16 training (``model.to(torch.bfloat16)`` and ``torch.optim.AdamW``) loses
updates: bf16 keeps 8 significant bits, so a step smaller than half a weight's last bit
rounds back to the same weight, and training stalls above fp32's loss. Keeping fp32
master weights fixes that but saves no memory (bf16 weights and gradients, fp32 master,
fp32 Adam moments: 16 bytes per parameter, as fp32 training). :class:`StochasticAdamW`
instead computes each AdamW update in fp32 and *stochastically rounds* the result into
the bf16 weight and bf16 moments: up with probability equal to the fraction of the last
bit, so that small updates land on average (as in "Revisiting BFloat16 Training", and
torchao's ``_AdamW(bf16_stochastic_round=True)``). Weights, gradients and both moments are
then 8 bytes per parameter against fp32's 16.

    model = model.to(torch.bfloat16)
    optimizer = StochasticAdamW(model.parameters(), lr=1e-3)
    mp = MixedPrecision("bf16")            # autocast keeps softmax, norms and loss in fp32
    with mp.autocast():
        loss = loss_fn(model(x), y)
    mp.backward(loss)
    mp.step(optimizer, clip_grad_norm=1.0)

fp32 parameters (islands) get the ordinary fp32 AdamW update with fp32 moments.
:func:`training_bytes` counts what a run holds per step: parameters, gradients and
optimizer state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

__all__ = ["StochasticAdamW", "round_stochastic", "training_bytes"]

_SLICE = 1 << 16  # elements updated at a time: fp32 temporaries of a few MB, not a model's


def round_stochastic(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` (fp32) rounded to bf16, up or down at random with the probability that makes
    the result right on average: the 16 bits bf16 drops are compared with 16 random bits.
    inf and NaN stay as they are. ``generator``: the random bits' source (default torch's
    global one)."""
    if x.dtype != torch.float32:
        raise ValueError(f"round_stochastic(x) needs an fp32 tensor, got {x.dtype}; pass x.float()")
    noise = torch.randint(
        0, 1 << 16, x.shape, dtype=torch.int32, device=x.device, generator=generator
    )
    bits = (x.view(torch.int32) + noise) & -65536  # the kept 16 bits, carried up or not
    rounded = bits.view(torch.float32).to(torch.bfloat16)  # exact: the low bits are zero
    return torch.where(torch.isfinite(x), rounded, x.to(torch.bfloat16))


class StochasticAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, bias-corrected moments) for bf16 parameters.

    Each step reads the weight, gradient and moments into fp32, computes the AdamW update
    there, and writes weight and moments back in the parameter's dtype: bf16 ones with
    :func:`round_stochastic`, fp32 ones exactly. It works through each parameter in slices
    of 65536 elements, so its fp32 temporaries stay a few MB whatever the layer's size.
    Moments are kept in the parameter's dtype.
    ``seed`` seeds the optimizer's own random generator (one per device), so torch's global
    random state is never touched, and the same run repeats bit for bit. (The generator's
    state is not part of :meth:`state_dict`: a resumed run rounds with fresh bits.)
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        seed: int = 0,
    ) -> None:
        if not lr >= 0:
            raise ValueError(f"StochasticAdamW(lr={lr!r}): must be >= 0, e.g. 1e-3")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"StochasticAdamW(betas={betas!r}): need two values in [0, 1)")
        if not eps > 0:
            raise ValueError(f"StochasticAdamW(eps={eps!r}): must be > 0, e.g. 1e-8")
        if not weight_decay >= 0:
            raise ValueError(f"StochasticAdamW(weight_decay={weight_decay!r}): must be >= 0")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self.seed = seed
        self._generators: dict[torch.device, torch.Generator] = {}

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._generators:
            self._generators[device] = torch.Generator(device).manual_seed(self.seed)
        return self._generators[device]

    def _store(self, target: torch.Tensor, value: torch.Tensor) -> None:
        if target.dtype == torch.bfloat16:
            target.copy_(round_stochastic(value, self._generator(target.device)))
        else:
            target.copy_(value)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        """One AdamW step for every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise ValueError("StochasticAdamW does not take sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                tensors = [p, p.grad, state["exp_avg"], state["exp_avg_sq"]]
                if all(t.is_contiguous() for t in tensors):  # in slices: bounded temporaries
                    flat = [t.view(-1) for t in tensors]
                    for start in range(0, p.numel(), _SLICE):
                        part = [t[start : start + _SLICE] for t in flat]
                        self._update(part, group, state["step"])
                else:
                    self._update(tensors, group, state["step"])
        return loss

    def _update(self, tensors: list[torch.Tensor], group: dict[str, Any], t: int) -> None:
        """AdamW on one slice (weight, gradient, moments) in fp32, stored back in the
        slices' dtypes."""
        p, grad_in, m, v = tensors
        lr, (beta1, beta2) = group["lr"], group["betas"]
        grad = grad_in.float()
        weight = p.float() * (1 - lr * group["weight_decay"])
        exp_avg = m.float().lerp_(grad, 1 - beta1)
        exp_avg_sq = v.float().lerp_(grad.square(), 1 - beta2)
        denom = (exp_avg_sq / (1 - beta2**t)).sqrt_().add_(group["eps"])
        weight.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**t))
        self._store(m, exp_avg)
        self._store(v, exp_avg_sq)
        self._store(p, weight)


def training_bytes(model: nn.Module, *optimizers: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes a training step holds besides activations: ``parameters``, ``gradients`` (as
    they are now: call it after a backward) and ``optimizer`` state tensors, each storage
    counted once, and their ``total``."""
    seen: set[tuple[torch.device, int]] = set()

    def size(tensors: Iterable[torch.Tensor]) -> int:
        total = 0
        for t in tensors:
            key = (t.device, t.untyped_storage().data_ptr())
            if key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
        return total

    params = list(model.parameters())
    counts = {
        "parameters": size(params),
        "gradients": size(p.grad for p in params if p.grad is not None),
        "optimizer": size(
            v
            for opt in optimizers
            for state in opt.state.values()
            for v in state.values()
            if isinstance(v, torch.Tensor)
        ),
    }
    counts["total"] = sum(counts.values())
    return counts
