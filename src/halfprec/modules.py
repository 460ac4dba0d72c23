"""Small shared facts about a model: its device, its size, each module's parameter count,
the finite peak of a tensor, fp32-island membership, how an exception is shown in one
line, and eval mode that gives the caller's ``training`` flags back.

Every module of halfprec asks these questions the same way by asking here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from halfprec.errors import clip, strip_ansi

_LINE_LIMIT = 240


def _tensors(model: nn.Module) -> Iterator[torch.Tensor]:
    yield from model.parameters()
    yield from model.buffers()


def model_device(model: nn.Module) -> torch.device:
    """The device of the first parameter (or buffer) of ``model``; CPU when it has none."""
    for t in _tensors(model):
        return t.device
    return torch.device("cpu")


def nbytes(model: nn.Module) -> int:
    """Bytes held by the parameters and buffers of ``model``; a tied tensor counts once."""
    seen: set[int] = set()
    total = 0
    for t in _tensors(model):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def param_counts(model: nn.Module) -> dict[str, int]:
    """Parameters (by count) of each module of ``model``, by qualified name (``""`` the
    whole model); a tied parameter counts once in each."""
    return {n: sum(p.numel() for p in m.parameters()) for n, m in model.named_modules()}


def finite_peak(tensor: torch.Tensor) -> float:
    """The largest finite ``|value|`` of ``tensor`` (0.0 when it has none).

    When every value is finite (the common case) no full-size temporary is made.
    """
    t = tensor.detach()
    if t.numel() == 0 or t.dtype == torch.bool:
        return 0.0
    low, high = torch.aminmax(t)
    peak = max(abs(float(low)), abs(float(high)))
    if peak == float("inf") or peak != peak:  # inf or NaN present: mask them out
        finite = t[torch.isfinite(t)]
        peak = float(finite.abs().max()) if finite.numel() else 0.0
    return peak


def in_island(name: str, islands: Iterable[str]) -> bool:
    """True when the module ``name`` is one of ``islands`` or inside one; the island ``""``
    is the whole model."""
    return any(i == "" or name == i or name.startswith(i + ".") for i in islands)


def first_line(exc: BaseException) -> str:
    """``"TypeName: first line of the message"`` (just ``"TypeName"`` when the message is
    empty), without ANSI colour codes, clipped to 240 characters at a word boundary: the
    one way halfprec shows an exception in one line."""
    text = strip_ansi(str(exc))
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    kind = type(exc).__name__
    return f"{kind}: {clip(line, _LINE_LIMIT)}" if line else kind


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` in eval mode for the block, then give every submodule its own
    ``training`` flag back (also when the block raises)."""
    flags = [(m, m.training) for m in model.modules()]
    # by flag, not model.eval(): a train() override (timm's LeViT drops cached tensors
    # there) would change the very model being looked at, e.g. hide a stale fp32 cache
    for m, _ in flags:
        m.training = False
    try:
        yield model
    finally:
        for m, training in flags:
            m.training = training
