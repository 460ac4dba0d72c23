"""Scaled half GEMMs: a matmul whose product overflows the half range, computed in half.

A scaled op island (:class:`~halfprec.convert.OpRef` with ``kind="scaled"``) runs one
GEMM-type op (:data:`SCALED_OPS`) on its two operands multiplied by powers of two, in the
half dtype, and returns the result in fp32 with the scales undone. Multiplying by a power
of two is exact in binary floating point (only a value pushed below the half dtype's
smallest normal loses bits), so the GEMM sees the same digits, in a range where its
result fits. CPU and CUDA half GEMMs accumulate in fp32 and round once at the end
(``tests/convert/test_scaled.py`` checks this for CPU fp16 and bf16), so the result
keeps half precision's relative error while its FLOPs stay in half.

The scales are dynamic and per tensor, computed at each call from the operands' largest
magnitudes with tensor ops alone (no Python branch on values: ``torch.compile`` keeps
one graph and ``torch.export``/ONNX carry the scaling as visible ops), as torchao's
float8 "dynamic scaling" does (``amax = max(abs(x))``, its scale rounded to a power of
two). The bound: with ``|a| <= 2**ea`` and ``|b| <= 2**eb``, every element of ``a @ b``
over an inner dimension ``K`` is at most ``K * 2**(ea + eb)``. Each operand is scaled
so that this bound is ``2**15`` (:data:`TOP`, within fp16's 65504 and far within bf16's
range) with the shift split evenly between the two: the result cannot overflow for any
``K``, and small values are pushed no lower than the bound needs (for ``K = 1024`` the
operands' peaks land near ``2**2`` and ``2**3``, not at 1, so less of them falls among
fp16's subnormals below 6e-5). The bias of ``linear`` and ``conv`` is added in fp32
after the scales are undone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from halfprec.tree import iter_tensors, map_tensors

_MATMULS = frozenset(
    {"__matmul__", "__rmatmul__", "matmul", "mm", "bmm", "mv", "linalg_matmul", "linear"}
)
_SPATIAL = {"conv1d": 1, "conv2d": 2, "conv3d": 3}  # a conv's spatial dimensions
_CONVS = frozenset(_SPATIAL)
# GEMM-type ops of two operands, linear in each (the bias of linear and conv aside)
SCALED_OPS: frozenset[str] = _MATMULS | _CONVS | {"einsum"}

TOP = 15  # the bound on a scaled product's elements is 2**TOP
_EXP = 126  # |exponent| of a scale: 2**±126 is a normal fp32 number


def _ceil_log2(k: int) -> int:
    return (max(int(k), 1) - 1).bit_length()


def _einsum_inner(equation: str, a: torch.Tensor, b: torch.Tensor) -> int:
    """How many products one output element of ``einsum(equation, a, b)`` sums."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        raise ValueError(f"einsum {equation!r} does not take two operands")
    sizes: dict[str, int] = {}
    ellipsis = 1
    for term, t in zip(terms, (a, b), strict=True):
        head, dots, tail = term.partition("...")
        letters = head + tail
        shape = list(t.shape)
        if dots:
            n = t.dim() - len(letters)
            ellipsis = max(ellipsis, math.prod(shape[len(head) : len(head) + n]))
            shape = shape[: len(head)] + shape[len(head) + n :]
        for letter, size in zip(letters, shape, strict=True):
            sizes[letter] = max(sizes.get(letter, 1), size)
    if not arrow:  # implicit output: the letters that appear once, and the ellipsis
        letters = "".join(terms).replace("...", "")
        out = "".join(x for x in sizes if letters.count(x) == 1) + "..."
    k = math.prod(size for letter, size in sizes.items() if letter not in out)
    return k * (ellipsis if "..." not in out else 1)


def inner_size(op: str, operands: tuple[torch.Tensor, torch.Tensor], args: tuple[Any, ...]) -> int:
    """How many products one output element of ``op`` on ``operands`` sums (its ``K``)."""
    a, b = operands
    if op == "einsum":
        return _einsum_inner(args[0], a, b)
    if op in _CONVS:  # weight (out, in / groups, *kernel)
        return math.prod(b.shape[1:])
    first = b if op == "__rmatmul__" else a  # x.__rmatmul__(y) is y @ x
    return int(first.shape[-1]) if first.dim() else 1


def _exponent(t: torch.Tensor) -> torch.Tensor:
    """The least integer ``e`` (fp32) with ``max|t| <= 2**e``; 0 for a zero or non-finite
    peak (inf/NaN then flow through the GEMM as they would unscaled)."""
    peak = t.detach().abs().max().float()  # max(), not amax(): torch.onnx needs amax dims
    e = torch.floor(torch.log2(peak)) + 1
    return torch.where(torch.isfinite(e), e, torch.zeros_like(e))


def _split_bias(
    op: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], torch.Tensor | None]:
    """linear and conv without their bias (added after unscaling), and the bias."""
    if op not in _CONVS and op != "linear":
        return args, kwargs, None
    if kwargs.get("bias") is not None:
        return args, {**kwargs, "bias": None}, kwargs["bias"]
    if len(args) > 2 and args[2] is not None:
        return (*args[:2], None, *args[3:]), kwargs, args[2]
    return args, kwargs, None


@dataclass(frozen=True)
class Scaled:
    """A GEMM call with its operands scaled (``args``, ``kwargs``); :meth:`undo` turns the
    GEMM's half result into the fp32 result of the unscaled call."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    undo_a: torch.Tensor
    undo_b: torch.Tensor
    bias: torch.Tensor | None
    spatial: int  # a conv's spatial dimensions (its bias is per channel), 0 for a matmul

    def undo(self, out: torch.Tensor) -> torch.Tensor:
        wide = out.float() * self.undo_a * self.undo_b
        if self.bias is None:
            return wide
        bias = self.bias.float()
        if self.spatial:  # (channels, 1, ...): a batched or an unbatched conv's output
            bias = bias.reshape(-1, *([1] * self.spatial))
        return wide + bias


def scale_operands(
    op: str, args: tuple[Any, ...], kwargs: dict[str, Any], dtype: torch.dtype
) -> Scaled | None:
    """The call ``op(*args, **kwargs)`` with its two operands multiplied by powers of two
    (see the module docs) and cast to ``dtype``; None where the call does not have exactly
    two floating operands (three einsum operands, say) or one is empty: the caller then
    computes it in fp32. Run with torch functions disabled; call the GEMM on
    ``Scaled.args`` with them enabled (other modes see an op on ``dtype`` operands), then
    :meth:`Scaled.undo` with them disabled again."""
    args, kwargs, bias = _split_bias(op, args, kwargs)
    tensors = [t for _, t in iter_tensors((args, kwargs))]
    if len(tensors) != 2 or not all(t.is_floating_point() and t.numel() for t in tensors):
        return None
    a, b = tensors
    shift = TOP - _ceil_log2(inner_size(op, (a, b), args))
    ea = (shift // 2 - _exponent(a)).clamp(-_EXP, _EXP)
    # x @ x: one tensor, one scale (its bound is then 2**(2 * (shift // 2)) <= 2**shift)
    eb = ea if b is a else (shift - shift // 2 - _exponent(b)).clamp(-_EXP, _EXP)
    sa, sb = torch.exp2(ea), torch.exp2(eb)

    def scale(t: torch.Tensor) -> torch.Tensor:
        return (t.float() * (sa if t is a else sb)).to(dtype)

    args, kwargs = map_tensors(scale, (args, kwargs))
    return Scaled(args, kwargs, torch.exp2(-ea), torch.exp2(-eb), bias, _SPATIAL.get(op, 0))
