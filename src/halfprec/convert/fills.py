"""Saturating fills: a fill constant beyond the half dtype's range becomes its finite limit.

``scores.masked_fill(mask, -1e9)`` raises "value cannot be converted to type c10::Half
without overflow" in fp16, and ``finfo(float32).min`` does the same. Saturated to -65504 the
masked positions still get exactly 0 after softmax, as in fp32. The constants of
``masked_fill``/``masked_fill_``, ``fill_``, ``full``, ``full_like``, ``new_full`` and
``where`` with a scalar are saturated when the result has the half dtype; infinities and
NaN are left alone (they are deliberate).

Only modules whose own ``forward`` source names one of these ops get the
:class:`SaturateFills` behaviour (found by reading the source once per class, at
conversion, never while the model runs), so models without such fills pay nothing. The
mode is made afresh for each call of such a module: it holds no state between calls.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from halfprec.convert.scope import NamedOpMode
from halfprec.convert.swap import Behaviour
from halfprec.dtypes import range_of

_FILL_CALL = re.compile(r"\b(masked_fill_?|fill_|full|full_like|new_full|where)\s*\(")


@functools.lru_cache(maxsize=1024)
def _source_has_fills(forward: Callable[..., Any]) -> bool:
    try:
        source = inspect.getsource(forward)
    except (OSError, TypeError):  # no source (built-in, compiled): assume nothing to fix
        return False
    return bool(_FILL_CALL.search(source))


def has_fill_ops(module: torch.nn.Module) -> bool:
    """True when ``type(module).forward`` names a fill op in its own source."""
    forward = getattr(type(module), "forward", None)
    return forward is not None and _source_has_fills(forward)


def _value_slot(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int | str, ...]:
    """Positions (int) or keywords (str) of the scalar constants of a fill op."""
    if name in ("masked_fill", "masked_fill_"):
        return (2, "value")
    if name == "fill_":
        return (1, "value")
    if name in ("full", "full_like"):
        return (1, "fill_value")
    if name == "new_full":
        return (2, "fill_value")
    if name == "where":
        return (1, 2, "input", "other", "self")
    return ()


def _result_dtype(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype | None:
    if kwargs.get("dtype") is not None:
        return kwargs["dtype"]  # type: ignore[no-any-return]
    if name == "full":
        return torch.get_default_dtype()
    tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    floats = [t.dtype for t in tensors if t.is_floating_point()]
    return floats[0] if floats else None


class SaturatingFills(NamedOpMode):
    """Saturates out-of-range fill constants of ``dtype`` results."""

    NAMES = frozenset(
        {"masked_fill", "masked_fill_", "fill_", "full", "full_like", "new_full", "where"}
    )

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.limit = range_of(dtype).max

    def on_op(
        self, func: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if name in self.NAMES and _result_dtype(name, args, kwargs) == self.dtype:
            args, kwargs = self._saturate(name, args, kwargs)
        return func(*args, **kwargs)

    def _saturate(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        new_args, new_kwargs = list(args), dict(kwargs)
        for slot in _value_slot(name, args, kwargs):
            holder: Any = new_args if isinstance(slot, int) else new_kwargs
            if isinstance(slot, int) and slot >= len(new_args):
                continue
            if isinstance(slot, str) and slot not in new_kwargs:
                continue
            value = holder[slot]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value) and abs(value) > self.limit:
                holder[slot] = math.copysign(self.limit, value)
        return tuple(new_args), new_kwargs


@dataclass(frozen=True)
class FillSettings:
    dtype: torch.dtype


class SaturateFills(Behaviour):
    """Runs the module's ``forward`` under :class:`SaturatingFills`."""

    attr = "_halfprec_fills"

    @classmethod
    def label(cls, settings: FillSettings) -> str:
        return "saturating fills"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with SaturatingFills(getattr(self, SaturateFills.attr).dtype):
            return super().forward(*args, **kwargs)  # type: ignore[misc]
