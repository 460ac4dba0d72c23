"""Attention with a fully masked query row, exported as PyTorch computes it.

``torch.nn.functional.scaled_dot_product_attention`` gives a query row whose boolean mask
hides every key an output of zeros (aten's ``_safe_softmax``). torch.onnx's translation of
it does not: it fills the hidden scores with the lowest float, so such a row attends to every
key alike (microsoft/onnxscript#2654 replaced ``-inf`` by the lowest float; #2479 had made
the translation match aten). Such rows are padding queries: a right-padded row of a
sliding-window decoder, where a query's whole window is padding. A file that gives them other
values than PyTorch fails halfprec's check, which compares every output element.

:func:`aten_masked_rows` traces each such call as the call followed by ``where(row has a
key, output, 0)``: exact in PyTorch (the rows are 0 already), and the ONNX file then
computes what PyTorch computes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_SDPA = torch.nn.functional.scaled_dot_product_attention


def _zero_masked_rows(out: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``out`` (..., queries, dim) with the rows whose ``mask`` (..., queries, keys) hides
    every key set to 0."""
    seen = mask.any(dim=-1, keepdim=True)
    return torch.where(seen, out, torch.zeros((), dtype=out.dtype, device=out.device))


class _MaskedRows(TorchFunctionMode):
    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is not _SDPA:
            return out
        mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
            return _zero_masked_rows(out, mask)
        return out


@contextmanager
def aten_masked_rows() -> Iterator[None]:
    """While tracing: boolean-masked attention keeps aten's zero rows in any exporter."""
    with _MaskedRows():
        yield
