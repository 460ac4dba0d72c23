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

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.optim.adamw import adamw

from halfprec.train.adamw_kernel import BucketKernel, hyperparameters, to_device
from halfprec.train.grads import local_tensor
from halfprec.train.rounding import KEY_LIMIT

__all__ = ["StochasticAdamW", "training_bytes"]

Quad = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # weight, grad, moments
Work = dict[tuple[int, torch.dtype, torch.device], list[Quad]]  # (step, dtype, device) -> quads
Job = tuple[list[Quad], dict[str, Any], int]  # a bucket, its group, its step
_FUSED_DEVICES = ("cpu", "cuda", "xpu")  # where torch's fused AdamW kernel runs
_BUCKET = 1 << 22  # elements per bucket: few kernel calls per step, a bounded scratch
_MAX_BUCKET = 1 << 29  # the random bits' counters (2 per element) stay within int32


class StochasticAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, bias-corrected moments) for bf16 parameters.

    Each step reads the weights, gradients and moments into fp32, computes the AdamW
    update there, and writes weights and moments back in the parameters' dtype: bf16 ones
    stochastically rounded (:mod:`halfprec.train.rounding`), fp16 ones rounded to nearest.
    fp32 parameters get torch's own AdamW (its fused kernel), with fp32 moments. Moments
    are kept in the parameter's dtype.

    It works in buckets of up to ``bucket`` elements (default 2**22): a large parameter is
    cut into buckets and updated where it lies; small ones are packed into one bucket
    through a scratch copy. Each bucket is one call of one kernel
    (:mod:`halfprec.train.adamw_kernel`): with ``compile`` (default), buckets of 2**20
    elements and more run it under ``torch.compile``, one fused loop that reads each
    weight, gradient and moment once and writes each once; the rest run it eagerly in
    chunks. The first compiled step compiles it (seconds, once per process); where
    compiling fails it warns once and runs eagerly.

    ``seed`` keys the random bits, so torch's global random state is never touched. A
    bucket's bits depend only on ``seed``, the step number and the bucket's place, so the
    same run repeats bit for bit (compiled or not), and a run resumed from
    :meth:`state_dict` rounds exactly as the uninterrupted one. The state is ``step`` (an
    int) and ``exp_avg``/``exp_avg_sq`` per parameter (each of the parameter's shape and
    dtype): older checkpoints load as they are.
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
        bucket: int | None = None,
        compile: bool = True,
    ) -> None:
        if not lr >= 0:
            raise ValueError(f"StochasticAdamW(lr={lr!r}): must be >= 0, e.g. 1e-3")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"StochasticAdamW(betas={betas!r}): need two values in [0, 1)")
        if not eps > 0:
            raise ValueError(f"StochasticAdamW(eps={eps!r}): must be > 0, e.g. 1e-8")
        if not weight_decay >= 0:
            raise ValueError(f"StochasticAdamW(weight_decay={weight_decay!r}): must be >= 0")
        if bucket is not None and not 1 <= bucket <= _MAX_BUCKET:
            raise ValueError(
                f"StochasticAdamW(bucket={bucket!r}): must be in [1, 2**29], e.g. 2**22"
            )
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self.seed = seed
        self.bucket = bucket
        self.kernel = BucketKernel(compile=compile)
        self._scratch: dict[
            tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]
        ] = {}

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        """One AdamW step for every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        jobs: list[Job] = []
        for group in self.param_groups:
            for (step, dtype, device), quads in self._prepare(group).items():
                if dtype in (torch.float32, torch.float64):
                    _adamw(quads, group, step, device)
                    continue
                jobs += [
                    (bucket, group, step) for bucket in _buckets(quads, self.bucket or _BUCKET)
                ]
        keys = self._keys(jobs)
        hypers: dict[tuple[int, int, torch.device], torch.Tensor] = {}
        for index, (bucket, group, step) in enumerate(jobs):
            device = bucket[0][0].device
            hyper = hypers.get((id(group), step, device))
            if hyper is None:
                hyper = hypers[id(group), step, device] = hyperparameters(group, step, device)
            self._update(bucket, hyper, keys[device][index])
        return loss

    def _keys(self, jobs: list[Job]) -> dict[torch.device, torch.Tensor]:
        """Each job's random-bit keys (first key, second key, offset 0), from ``seed``, its
        step and its place in this step, as one int32 (jobs, 3) table per device (one copy
        to an accelerator per step, not one per bucket)."""
        rows = []
        for index, (_, _, step) in enumerate(jobs):
            digest = hashlib.blake2b(f"{self.seed}/{step}/{index}".encode(), digest_size=8)
            word = int.from_bytes(digest.digest(), "little")
            rows.append((word % KEY_LIMIT, (word >> 32) % KEY_LIMIT, 0))
        table = torch.tensor(rows, dtype=torch.int32).view(-1, 3)
        devices = {bucket[0][0].device for bucket, _, _ in jobs}
        return {device: to_device(table, device) for device in devices}

    def _prepare(
        self, group: dict[str, Any]
    ) -> dict[tuple[int, torch.dtype, torch.device], list[Quad]]:
        """The group's parameters with a gradient, with state created and the step
        counted, grouped by step number, dtype and device (local shards of DTensors)."""
        work: Work = {}
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
            quad = (p, p.grad, state["exp_avg"], state["exp_avg_sq"])
            weight, grad, m, v = (local_tensor(t) for t in quad)
            key = (int(state["step"]), weight.dtype, weight.device)
            work.setdefault(key, []).append((weight, grad, m, v))
        return work

    def _update(self, bucket: list[Quad], hyper: torch.Tensor, keys: torch.Tensor) -> None:
        """The kernel on one bucket: on the tensors themselves when the bucket is one
        contiguous piece, else on a scratch copy (weight, moments, gradient) that is
        written back after."""
        weight = bucket[0][0]
        stochastic = weight.dtype == torch.bfloat16
        if len(bucket) == 1 and all(t.is_contiguous() for t in bucket[0]):
            weight, grad, m, v = (t.view(-1) for t in bucket[0])
            self.kernel((weight, grad, m, v), hyper, keys, stochastic)
            return
        n = sum(piece[0].numel() for piece in bucket)
        rows, grads = self._rows(weight.device, weight.dtype, n)
        for piece, offset in _offsets(bucket):
            for tensor, into in zip(piece, _places(rows, grads, offset, piece[0]), strict=True):
                into.copy_(tensor)
        self.kernel((rows[0], grads, rows[1], rows[2]), hyper, keys, stochastic)
        for piece, offset in _offsets(bucket):
            places = _places(rows, grads, offset, piece[0])
            for index in (0, 2, 3):  # weight and moments (the gradient is only read)
                piece[index].copy_(places[index])

    def _rows(
        self, device: torch.device, dtype: torch.dtype, n: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scratch for a packed bucket of ``n`` elements, kept between steps: weight and
        moments as the three rows of one tensor in ``dtype``, and the gradient in fp32."""
        kept = self._scratch.get((device, dtype))
        if kept is None or kept[1].numel() < n:
            rows = torch.empty(3 * n, dtype=dtype, device=device)
            kept = self._scratch[device, dtype] = (rows, torch.empty(n, device=device))
        return kept[0][: 3 * n].view(3, n), kept[1][:n]


def _places(
    rows: torch.Tensor, grads: torch.Tensor, offset: int, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where a piece's weight, gradient and moments lie in a packed bucket's scratch."""
    span, shape = slice(offset, offset + weight.numel()), weight.shape
    return (
        rows[0, span].view(shape),
        grads[span].view(shape),
        rows[1, span].view(shape),
        rows[2, span].view(shape),
    )


def _offsets(bucket: list[Quad]) -> Iterator[tuple[Quad, int]]:
    """Each piece of ``bucket`` with its offset in the bucket (they lie one after the other)."""
    offset = 0
    for piece in bucket:
        yield piece, offset
        offset += piece[0].numel()


def _adamw(quads: Sequence[Quad], group: dict[str, Any], step: int, device: torch.device) -> None:
    """torch's AdamW update, in place, on full-precision tensors that are at ``step``."""
    beta1, beta2 = group["betas"]
    fused = device.type in _FUSED_DEVICES
    adamw(
        [q[0] for q in quads],
        [q[1] for q in quads],
        [q[2] for q in quads],
        [q[3] for q in quads],
        [],
        # the step each tensor is at before this update; adamw counts it up by one
        [torch.full((), float(step - 1), dtype=torch.float32, device=device) for _ in quads],
        foreach=False if not fused else None,
        fused=fused,
        amsgrad=False,
        beta1=beta1,
        beta2=beta2,
        lr=group["lr"],
        weight_decay=group["weight_decay"],
        eps=group["eps"],
        maximize=False,
    )


def _pieces(quads: Sequence[Quad], limit: int) -> Iterator[Quad]:
    """Each parameter whole, or in flat slices of ``limit`` elements when it is larger
    (and contiguous: a strided one stays whole)."""
    for quad in quads:
        n = quad[0].numel()
        if n <= limit or not all(t.is_contiguous() for t in quad):
            yield quad
            continue
        flat = [t.view(-1) for t in quad]
        for start in range(0, n, limit):
            yield tuple(t[start : start + limit] for t in flat)  # type: ignore[misc]


def _buckets(quads: Sequence[Quad], limit: int) -> Iterator[list[Quad]]:
    """The pieces packed, in order, into buckets of at most ``limit`` elements."""
    bucket: list[Quad] = []
    size = 0
    for piece in _pieces(quads, limit):
        k = piece[0].numel()
        if bucket and size + k > limit:
            yield bucket
            bucket, size = [], 0
        bucket.append(piece)
        size += k
    if bucket:
        yield bucket


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
