"""Where the audit follows a floating tensor made without ``dtype``: such a tensor is a leak
only if its fp32 values meet a half tensor in an op, or reach the model's output.

A mask made with ``torch.ones(...)`` that is only turned into booleans or indices, or cast
into the model's dtype before it meets half values, moves no value out of half. The audit
marks each such tensor with its :class:`Origin` (the user's line that made it), carries the
mark to every wide floating tensor computed from it alone, and reports the origin once per
tensor made, when a marked tensor meets half or is returned.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch.utils.weak import WeakIdKeyDictionary

WIDE = (torch.float32, torch.float64)


@dataclass(frozen=True)
class Origin:
    """One floating tensor made without ``dtype``, at one user line."""

    file: str
    line: int
    op: str
    dtype: torch.dtype
    serial: int


class Trace:
    """The marks of the tensors followed so far, by tensor identity (kept weakly)."""

    def __init__(self) -> None:
        self._marks: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._serials = itertools.count()
        self._reported: set[int] = set()

    def mark(self, tensor: torch.Tensor, where: tuple[str, int], op: str) -> None:
        """Follow ``tensor``, made by ``op`` at ``where`` (file, line)."""
        self._marks[tensor] = Origin(*where, op, tensor.dtype, next(self._serials))

    def origin(self, tensor: torch.Tensor) -> Origin | None:
        """The mark of ``tensor``, if it is followed."""
        found = self._marks.get(tensor)
        return found if isinstance(found, Origin) else None

    def any_marked(self, tensors: Iterable[torch.Tensor]) -> bool:
        return bool(self._marks) and any(t in self._marks for t in tensors)

    def carry(self, inputs: Iterable[torch.Tensor], out: object) -> None:
        """Mark each wide floating tensor of ``out`` (a tensor, or a tuple or list of them)
        with the first mark among ``inputs``; other tensors carry no fp32 value on."""
        source = next((o for t in inputs if (o := self.origin(t)) is not None), None)
        if source is None:
            return
        outs = out if isinstance(out, (list, tuple)) else (out,)
        for t in outs:
            if isinstance(t, torch.Tensor) and t.dtype in WIDE and t not in self._marks:
                self._marks[t] = source

    def first_reports(self, tensors: Iterable[torch.Tensor]) -> list[Origin]:
        """The marks of ``tensors`` not reported yet, each tensor made counted once; the
        rest of ``tensors`` (unmarked) are not included."""
        found: list[Origin] = []
        for t in tensors:
            origin = self.origin(t)
            if origin is not None and origin.serial not in self._reported:
                self._reported.add(origin.serial)
                found.append(origin)
        return found
