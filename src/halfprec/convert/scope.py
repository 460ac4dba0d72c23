"""Run a ``TorchFunctionMode`` only while certain modules' ``forward`` runs, through hooks.

The mode is entered by a forward pre-hook and left by a forward hook that runs even when
``forward`` raises, so other modules pay nothing. Nested calls of attached modules (a module
calling itself, or one attached module inside another) enter the mode once per thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["ModeScope", "NamedOpMode"]


class NamedOpMode(TorchFunctionMode):
    """A mode that hands each torch call to :meth:`on_op` with the op's plain name
    (``masked_fill`` for both ``Tensor.masked_fill`` and ``torch.masked_fill``)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return self.on_op(func, getattr(func, "__name__", ""), args, kwargs or {})

    def on_op(
        self, func: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        raise NotImplementedError


class ModeScope:
    """One mode, active inside the calls of every module passed to :meth:`attach`."""

    def __init__(self, mode: TorchFunctionMode) -> None:
        self.mode = mode
        self.local = threading.local()

    def attach(self, module: nn.Module) -> None:
        module.register_forward_pre_hook(self._enter)
        module.register_forward_hook(self._leave, always_call=True)

    def _enter(self, mod: nn.Module, args: tuple[Any, ...]) -> None:
        depth = getattr(self.local, "depth", 0)
        if depth == 0:
            self.mode.__enter__()
        self.local.depth = depth + 1

    def _leave(self, mod: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        self.local.depth -= 1
        if self.local.depth == 0:
            self.mode.__exit__(None, None, None)
