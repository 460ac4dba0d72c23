"""The registry of ways of running a model (:class:`~halfprec.bench.ways.base.Way`):
what bench's variants, deploy's candidates and ``halfprec bench --list-variants`` read.

Adding a way is one module with a :class:`Way` subclass and one line in :data:`_BUILT_IN`
(or, from outside the package, a call to :func:`register`); docs/architecture.md shows how.
"""

from __future__ import annotations

from halfprec.bench.ways.autocast import Autocast
from halfprec.bench.ways.base import Way
from halfprec.bench.ways.converted import Converted
from halfprec.bench.ways.eager import Fp32
from halfprec.bench.ways.naive import Naive
from halfprec.bench.ways.ort import OnnxRuntime
from halfprec.bench.ways.ov import OpenVINO

__all__ = ["Way", "WAYS", "choice_kinds", "get", "register", "unregister"]

_BUILT_IN: tuple[Way, ...] = (Fp32(), Naive(), Autocast(), Converted(), OpenVINO(), OnnxRuntime())

WAYS: dict[str, Way] = {w.name: w for w in _BUILT_IN}
"""Every way by name, in the order bench lists them."""


def register(way: Way) -> None:
    """Offer ``way`` to bench, deploy and the CLI from now on (its name must be new)."""
    if not getattr(way, "name", "") or "-" in way.name or "+" in way.name:
        raise ValueError(f"a way's name is a word without '-' or '+', got {way.name!r}")
    if way.name in WAYS:
        raise ValueError(f"a way named {way.name!r} is registered already; pick another name")
    if not way.dtypes:
        raise ValueError(f"way {way.name!r} names no dtype it runs in; set its dtypes")
    WAYS[way.name] = way


def unregister(name: str) -> None:
    """Withdraw the way ``name`` that :func:`register` added (the built-in ones stay)."""
    if any(w.name == name for w in _BUILT_IN):
        raise ValueError(f"{name!r} is a built-in way; it cannot be withdrawn")
    WAYS.pop(name, None)


def get(name: str) -> Way:
    """The way named ``name`` (a ``KeyError`` naming the choices otherwise)."""
    if name not in WAYS:
        raise KeyError(f"no way named {name!r}; registered: {', '.join(WAYS)}")
    return WAYS[name]


def choice_kinds() -> tuple[str, ...]:
    """The ways deploy and bench's "auto would choose" pick among."""
    return tuple(n for n, w in WAYS.items() if w.choosable)
