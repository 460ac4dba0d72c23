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
import math
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.optim.adamw import adamw

from halfprec.train.grads import local_tensor

__all__ = ["StochasticAdamW", "round_stochastic", "training_bytes"]

Quad = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # weight, grad, moments
Work = dict[tuple[int, torch.dtype, torch.device], list[Quad]]  # (step, dtype, device) -> quads
_FUSED_DEVICES = ("cpu", "cuda", "xpu")  # where torch's fused AdamW kernel runs
_BUCKET = 1 << 22  # elements per bucket: few kernels per step, a bounded scratch
_LOW = -(2**63)  # random_(_LOW, None) on int64: every bit random
_UPPER = 1 if sys.byteorder == "little" else 0  # where an fp32's upper 16 bits lie


def round_stochastic(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``x`` (fp32) rounded to bf16, up or down at random with the probability that makes
    the result right on average: the 16 bits bf16 drops are compared with 16 random bits.
    inf and NaN stay as they are. ``generator``: the random bits' source (default torch's
    global one)."""
    if x.dtype != torch.float32:
        raise ValueError(f"round_stochastic(x) needs an fp32 tensor, got {x.dtype}; pass x.float()")
    values = x.reshape(-1).clone()
    bits = torch.empty(values.shape, dtype=torch.int32, device=x.device)
    words = torch.empty(_words(values.numel()), dtype=torch.int64, device=x.device)
    return _round_in_place(values, bits, words, generator).to(torch.bfloat16).view(x.shape)


def _words(count: int) -> int:
    """Random 64-bit words that give ``count`` 16-bit numbers."""
    return (count + 3) // 4


def _round_in_place(
    values: torch.Tensor,
    bits: torch.Tensor,
    words: torch.Tensor,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """``values`` (flat fp32) stochastically rounded to bf16 values, returned as fp32 in
    ``bits``' memory (so that the cast to bf16 is exact); ``values`` is overwritten.

    A value's low 16 bits plus 16 random bits carry into the kept 16 with probability
    (low bits) / 2**16. The random bits come four to a 64-bit word, which on CPU (one
    Mersenne Twister, one thread) takes a third of the time of drawing each alone, and
    are widened to int32 as unsigned 16-bit numbers in one copy. inf cannot carry (its
    low bits are zero); NaN is put back at the end."""
    words.random_(-(2**63), None, generator=generator)  # every bit random
    bits.copy_(words.view(torch.uint16)[: values.numel()])  # 0 .. 2**16 - 1
    bits.add_(values.view(torch.int32)).bitwise_and_(-65536)  # carry, then truncate
    rounded = bits.view(torch.float32)
    if _finite_on_cpu(values):  # no NaN: nothing to mend
        return rounded
    torch.minimum(values, rounded, out=values)  # NaN where the input was NaN, else <= rounded
    return torch.maximum(rounded, values, out=rounded)


def _finite_on_cpu(values: torch.Tensor) -> bool:
    """Whether ``values`` is on the CPU and holds no inf or NaN (there the check reads less
    than mending NaN after rounding; on an accelerator it would cost a sync)."""
    return values.device.type == "cpu" and math.isfinite(values.sum())


def _carry(
    values: torch.Tensor, bits: torch.Tensor, words: torch.Tensor, halves: list[torch.Generator]
) -> None:
    """16 random bits added to each of ``values`` (flat fp32) as integers, in place: the
    upper 16 bits are then the stochastically rounded bf16 (as in :func:`_round_in_place`;
    :func:`_store` truncates while it writes). The random words are drawn in two halves,
    one per generator of ``halves``, on two threads when torch uses more than one (torch's
    CPU generator runs on one thread, and releases the GIL while it draws): the same bits
    whatever the thread count.

    inf and NaN need no mending when the values come from bf16 tensors through CPU float
    arithmetic: inf has zero low bits, and a NaN there either carries an input's payload
    (a bf16's: zero low bits) or is the CPU's default NaN (zero low bits too), so no carry
    reaches it. (A GPU's default NaN has every bit set: there :func:`_round_in_place`.)"""
    first, second = words.tensor_split(2)
    drawn: list[torch.Tensor] = []
    draw = threading.Thread(
        target=lambda: drawn.append(first.random_(_LOW, None, generator=halves[0]))
    )
    threaded = torch.get_num_threads() > 1
    draw.start() if threaded else draw.run()
    second.random_(_LOW, None, generator=halves[1])
    if threaded:
        draw.join()
    if not drawn:
        raise RuntimeError("StochasticAdamW: drawing random bits failed (see the thread's error)")
    bits.copy_(words.view(torch.uint16)[: values.numel()])  # 0 .. 2**16 - 1
    values.view(torch.int32).add_(bits)  # (adding int16 directly is 6x slower on CPU)


def _store(target: torch.Tensor, source: torch.Tensor, truncated: bool) -> None:
    """``source`` (fp32, ``target``'s shape, last dim contiguous) written into ``target``:
    when ``truncated`` and ``target`` is bf16, as ``source``'s upper 16 bits (the carry of
    :func:`_carry` done: one strided
    copy of the fp32 values' upper halves, which drops the low bits on the way)."""
    if truncated and target.dtype == torch.bfloat16:
        upper = source.view(torch.int16)[..., _UPPER::2]  # every fp32's upper half, in place
        target.view(torch.int16).copy_(upper)
    else:
        target.copy_(source)


class StochasticAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, bias-corrected moments) for bf16 parameters.

    Each step reads the weights, gradients and moments into fp32, computes the AdamW
    update there with torch's fused AdamW kernel, and writes weights and moments back in
    the parameters' dtype: bf16 ones stochastically rounded (as :func:`round_stochastic`),
    fp32 ones as torch's AdamW would (fp32 parameters are updated in place by the same
    kernel). Moments are kept in the parameter's dtype.

    It works in buckets of up to ``bucket`` elements (default 2**22): small parameters are
    packed together and large ones cut. On CPU a bf16 bucket takes nine passes over
    memory: weight, gradient and both moments copied in (three copies: the moments of a
    contiguous parameter are the two rows of one tensor), the fused kernel, the random
    bits, the carry (a widening copy and an integer add), and weight and moments written
    back (two copies that keep each fp32's upper half). Its scratch holds 34 bytes per
    bucket element, kept between steps (at most 136 MiB per device by default; less when
    the parameters are fewer).

    ``seed`` seeds the optimizer's own random generator (one per device), so torch's global
    random state is never touched. Each bucket's random bits depend only on ``seed``, the
    step number and the bucket's place, so the same run repeats bit for bit, and a run
    resumed from :meth:`state_dict` rounds exactly as the uninterrupted one. The state is
    ``step`` (an int) and ``exp_avg``/``exp_avg_sq`` per parameter (each of the
    parameter's shape and dtype), as before this optimizer worked in buckets: older
    checkpoints load as they are.
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
    ) -> None:
        if not lr >= 0:
            raise ValueError(f"StochasticAdamW(lr={lr!r}): must be >= 0, e.g. 1e-3")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"StochasticAdamW(betas={betas!r}): need two values in [0, 1)")
        if not eps > 0:
            raise ValueError(f"StochasticAdamW(eps={eps!r}): must be > 0, e.g. 1e-8")
        if not weight_decay >= 0:
            raise ValueError(f"StochasticAdamW(weight_decay={weight_decay!r}): must be >= 0")
        if bucket is not None and not bucket >= 1:
            raise ValueError(f"StochasticAdamW(bucket={bucket!r}): must be >= 1, e.g. 2**20")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self.seed = seed
        self.bucket = bucket
        self._generators: dict[tuple[torch.device, int | None], torch.Generator] = {}
        self._scratch: dict[torch.device, _Scratch] = {}

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        """One AdamW step for every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0  # the bucket's place in this step: part of its random bits' seed
        for group in self.param_groups:
            for (step, dtype, device), quads in self._prepare(group).items():
                if dtype in (torch.float32, torch.float64):
                    _adamw(quads, group, step, device)
                    continue
                limit = self.bucket or _BUCKET
                for bucket in _buckets(quads, limit):
                    self._update(bucket, group, step, index)
                    index += 1
        return loss

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
                state["exp_avg"], state["exp_avg_sq"] = _moments(p)
            state["step"] += 1
            quad = (p, p.grad, state["exp_avg"], state["exp_avg_sq"])
            weight, grad, m, v = (local_tensor(t) for t in quad)
            key = (int(state["step"]), weight.dtype, weight.device)
            work.setdefault(key, []).append((weight, grad, m, v))
        return work

    def _update(self, bucket: list[Quad], group: dict[str, Any], step: int, index: int) -> None:
        """AdamW on one bucket: gathered into fp32 scratch, updated by the fused kernel,
        rounded (stochastically for bf16) and scattered back."""
        device, dtype = bucket[0][0].device, bucket[0][0].dtype
        n = sum(piece[0].numel() for piece in bucket)
        scratch = self._scratch.get(device)
        if scratch is None or scratch.size < n:
            scratch = self._scratch[device] = _Scratch(device, n)
        rows = scratch.floats[: 4 * n].view(4, n)  # weight, m, v, grad
        for piece, offset in _offsets(bucket):
            for tensor, into in _links(piece, rows, offset):
                into.copy_(tensor)
        weight, m, v, grad = rows
        _adamw([(weight, grad, m, v)], group, step, device)
        values, truncated = rows[:3], False  # weight, m and v
        if dtype == torch.bfloat16:
            words = scratch.words[: _words(3 * n)]
            truncated = device.type == "cpu"  # NaN stays NaN there (see _carry)
            if truncated:
                halves = [self._generator(device, step, index, part) for part in (0, 1)]
                _carry(values.view(-1), scratch.bits[: 3 * n], words, halves)
            else:
                generator = self._generator(device, step, index)
                flat = _round_in_place(values.view(-1), scratch.bits[: 3 * n], words, generator)
                values = flat.view(3, n)
        for piece, offset in _offsets(bucket):
            for target, source in _links(piece, values, offset):
                _store(target, source, truncated)

    def _generator(
        self, device: torch.device, step: int, index: int, part: int | None = None
    ) -> torch.Generator:
        """A generator for ``device`` seeded from ``seed``, the step, the bucket's place and
        (on CPU, where a bucket's bits are drawn in two parts) the part."""
        generator = self._generators.get((device, part))
        if generator is None:
            generator = self._generators[device, part] = torch.Generator(device)
        key = f"{self.seed}/{step}/{index}" + ("" if part is None else f"/{part}")
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return generator.manual_seed(int.from_bytes(digest, "little") >> 1)


class _Scratch:
    """A device's fp32 working memory for buckets of up to ``size`` elements: weight,
    moments and gradient (4 floats each), the random bits widened (3 int32) and as drawn
    (3 int16): 34 bytes per element."""

    def __init__(self, device: torch.device, size: int) -> None:
        self.size = size
        self.floats = torch.empty(4 * size, dtype=torch.float32, device=device)
        self.bits = torch.empty(3 * size, dtype=torch.int32, device=device)
        self.words = torch.empty(_words(3 * size), dtype=torch.int64, device=device)


def _moments(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero first and second moments for ``p``: for a contiguous plain tensor, the two rows
    of one tensor, so that a step copies both in one kernel (see :func:`_links`)."""
    if local_tensor(p) is not p or not p.is_contiguous():  # a DTensor, or strided
        m = torch.zeros_like(p, memory_format=torch.preserve_format)
        return m, torch.zeros_like(m)
    pair = torch.zeros((2, *p.shape), dtype=p.dtype, device=p.device)
    return pair[0], pair[1]


def _pair(m: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """``m`` and ``v`` as the rows of one (2, numel) view when they lie so in one storage
    (as :func:`_moments` makes them, and slices of those), else None."""
    k = m.numel()
    if not (m.is_contiguous() and v.is_contiguous()) or m.shape != v.shape:
        return None
    if m.untyped_storage().data_ptr() != v.untyped_storage().data_ptr():
        return None
    delta = v.storage_offset() - m.storage_offset()
    return m.as_strided((2, k), (delta, 1)) if delta >= k else None


def _offsets(bucket: list[Quad]) -> Iterator[tuple[Quad, int]]:
    """Each piece of ``bucket`` with its offset in the bucket (they lie one after the other)."""
    offset = 0
    for piece in bucket:
        yield piece, offset
        offset += piece[0].numel()


def _links(piece: Quad, rows: torch.Tensor, offset: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(a tensor of ``piece``, its place in ``rows``) for the weight, the moments (one pair
    when they are the rows of one tensor: one copy for both) and, when ``rows`` has a
    fourth row, the gradient. ``rows``: (weight, m, v[, grad]) by bucket element."""
    weight, grad, m, v = piece
    cols = rows[:, offset : offset + weight.numel()]
    links = [(weight, cols[0].view(weight.shape))]
    pair = _pair(m, v)
    if pair is None:
        links += [(m, cols[1].view(m.shape)), (v, cols[2].view(v.shape))]
    else:
        links.append((pair, cols[1:3]))
    if rows.shape[0] == 4:
        links.append((grad, cols[3].view(grad.shape)))
    return links


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
