"""A ``TorchFunctionMode`` that sees each torch call by the op's plain name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.overrides import TorchFunctionMode


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
