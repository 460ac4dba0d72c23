"""The one table of the torch ops that take a Python constant into a tensor (fills) or
make a new tensor (factories).

``preflight`` (runtime fills in fp32), ``leaks.audit`` (runtime leaks in half) and the
``leaks.lint`` rules (source code) all look names up here, so they agree on what a fill or
a factory is. Names are bare (``"masked_fill"``), whether called as ``torch.x`` or
``tensor.x``.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


FILL_OPS: frozenset[str] = _words(
    "masked_fill masked_fill_ fill fill_ full full_like new_full index_fill index_fill_ "
    "fill_diagonal_ masked_scatter where clamp clamp_ clamp_min clamp_max tensor new_tensor"
)
"""Ops whose Python constant becomes a value of the tensor (and overflows in half)."""

FACTORY_OPS: frozenset[str] = _words(
    "zeros ones full empty arange rand randn tensor eye linspace logspace"
)
"""``torch.*`` functions that make a tensor, fp32 by default when no ``dtype`` is given."""

SCALAR_OPS: frozenset[str] = _words(
    "mul add sub rsub __mul__ __rmul__ __add__ __radd__ __sub__ __rsub__"
)
"""Arithmetic whose Python scalar operand is cast to the tensor's dtype (``x * -1e9``)."""


def bare(op: str) -> str:
    """``"Tensor.masked_fill"`` or ``"torch.full"`` -> ``"masked_fill"`` / ``"full"``."""
    return op.rpartition(".")[2]


def is_fill(op: str) -> bool:
    """True when ``op`` (bare or qualified) is in :data:`FILL_OPS`."""
    return bare(op) in FILL_OPS


def is_factory(op: str) -> bool:
    """True when ``op`` (bare or qualified) is in :data:`FACTORY_OPS`."""
    return bare(op) in FACTORY_OPS
