"""Behaviour that travels with a module: its class is swapped for a subclass.

A converted model is an ordinary module tree. Where halfprec changes how a module runs
(the root casts its inputs and outputs, an fp32 island widens what it receives, a half
module casts stray fp32 tensors, fills saturate, single ops run in fp32), the module's class
is replaced by a subclass of it that mixes in one :class:`Behaviour` per change, the way
``torch.nn.utils.parametrize`` does. Each behaviour keeps its settings in one frozen,
plain attribute of the module. So the module:

- keeps its state-dict keys, parameters and ``isinstance`` checks;
- shows its behaviours in ``print(model)`` (``LayerNorm[fp32 island](...)``);
- deep-copies and pickles (``torch.save(model)``) like any module: pickling names the
  original class and the behaviours, never the generated subclass;
- has no hooks, thread-locals or closures, so ``torch.compile`` traces its ``forward`` in
  the same graphs as the original's.

``forward`` keeps the original's signature (``inspect.signature`` follows
``__wrapped__``), which Hugging Face's ``generate`` and ``Trainer`` read.
"""

from __future__ import annotations

import functools
import types
from typing import Any, ClassVar

import torch
from torch import nn


class Behaviour:
    """A mixin for :func:`swap`. ``attr`` names the module attribute holding its settings;
    ``label(settings)`` is shown in ``print(model)`` ("" shows nothing)."""

    attr: ClassVar[str] = ""

    @classmethod
    def label(cls, settings: Any) -> str:
        return ""


def capturing() -> bool:
    """True while the current CUDA stream captures a CUDA graph (by hand, or
    ``torch.compile``'s ``mode="reduce-overhead"``/``"max-autotune"``). A capture cannot
    read a value on the host: the sync raises. Without CUDA initialised (every CPU run)
    this is one cheap flag read and never asks the driver."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def tracing() -> bool:
    """True while ``torch.compile``, ``torch.export`` or ``torch.jit.trace`` records a graph,
    or a CUDA graph is captured (:func:`capturing`): a behaviour must not branch on tensor
    values then (the graph would keep one answer; a capture cannot sync at all)."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling() or capturing()


def values_readable(t: torch.Tensor) -> bool:
    """Whether a behaviour may read ``t``'s values on the host in this call: only eager, on
    the CPU. While a graph is recorded (:func:`tracing`) the answer would be frozen into
    the graph; on an asynchronous device (CUDA and the like) each read is a
    device-to-host sync that stalls the queue on every forward; a meta tensor has no
    values. Where this is False a behaviour takes its static answer, the one a compiled
    graph takes."""
    return t.device.type == "cpu" and not tracing()


def _rebuild(base: type[nn.Module], mixins: tuple[type[Behaviour], ...]) -> nn.Module:
    """Unpickling: a bare instance of the swapped class (its state is set afterwards)."""
    cls = _swapped(base, mixins)
    return cls.__new__(cls)  # type: ignore[no-any-return]


_CLASSES: dict[tuple[type[nn.Module], tuple[type[Behaviour], ...]], type[nn.Module]] = {}


def _swapped(base: type[nn.Module], mixins: tuple[type[Behaviour], ...]) -> type[nn.Module]:
    """The one subclass of ``base`` with ``mixins`` (made once, then reused)."""
    key = (base, mixins)
    if key not in _CLASSES:
        _CLASSES[key] = _make(base, mixins)
    return _CLASSES[key]


def _make(base: type[nn.Module], mixins: tuple[type[Behaviour], ...]) -> type[nn.Module]:
    # the outermost behaviour's forward itself (its code and closure, so no extra frame
    # per call), as a function of its own that carries the original's name and signature
    first = mixins[0].forward  # type: ignore[attr-defined]
    forward = types.FunctionType(
        first.__code__, first.__globals__, first.__name__, first.__defaults__, first.__closure__
    )
    forward.__kwdefaults__ = first.__kwdefaults__
    functools.update_wrapper(forward, base.forward)

    def _get_name(self: nn.Module) -> str:
        labels = [m.label(getattr(self, m.attr)) for m in mixins]
        shown = ", ".join(x for x in labels if x)
        return f"{base.__name__}[{shown}]" if shown else base.__name__

    def __reduce_ex__(self: nn.Module, protocol: Any) -> Any:
        return (_rebuild, (base, mixins), self.__getstate__())

    namespace = {
        "forward": forward,
        "_get_name": _get_name,
        "__reduce_ex__": __reduce_ex__,
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "_halfprec_base": base,
        "_halfprec_mixins": mixins,
    }
    return type(base.__name__, (*mixins, base), namespace)


def base_class(module: nn.Module) -> type[nn.Module]:
    """The class ``module`` had before any :func:`swap`."""
    return getattr(type(module), "_halfprec_base", type(module))  # type: ignore[no-any-return]


def behaviours(module: nn.Module) -> tuple[type[Behaviour], ...]:
    """The behaviours swapped into ``module`` (outermost first)."""
    return getattr(type(module), "_halfprec_mixins", ())  # type: ignore[no-any-return]


def swap(module: nn.Module, settings: dict[type[Behaviour], Any]) -> None:
    """Give ``module`` the behaviours in ``settings`` (in that order, outermost first), each
    with its settings object, on top of those it already has."""
    have = behaviours(module)
    mixins = have + tuple(m for m in settings if m not in have)
    for mixin, value in settings.items():
        object.__setattr__(module, mixin.attr, value)
    module.__class__ = _swapped(base_class(module), mixins)


def unswap(module: nn.Module) -> None:
    """Give ``module`` its original class back and drop the behaviours' settings."""
    for mixin in behaviours(module):
        module.__dict__.pop(mixin.attr, None)
    module.__class__ = base_class(module)
