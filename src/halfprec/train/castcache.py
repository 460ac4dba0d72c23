"""Autocast's weight casts kept for a whole optimizer step of several micro-batches.

``torch.autocast`` caches the bf16/fp16 copy of each weight (a leaf tensor that requires
grad) for as long as an autocast region is open, and clears the cache when the outermost
region exits. One micro-batch per step therefore casts each weight once per step: the
forward and loss share one region and backward reuses the copies autograd saved. With
gradient accumulation every micro-batch opens a new region and casts every weight again,
although the weights change only at the optimizer step.

:class:`StepCastCache` holds one level of autocast's nesting count from the first
micro-batch's region to the step, so that the regions in between do not clear the cache and
each weight is cast once per step. The cast copies feed every micro-batch's graph; the cast's
backward keeps no tensors, so each micro-batch's backward goes through it as usual.
"""

from __future__ import annotations

import threading

import torch


class StepCastCache:
    """One held level of autocast's nesting count, taken by :meth:`hold` and given back by
    :meth:`release`, which clears the cache when no region is open. The count is
    thread-local, so the level is given back only on the thread that took it."""

    def __init__(self) -> None:
        self.holder: int | None = None  # the thread holding a level, if any

    def hold(self) -> None:
        """Keep the casts of the regions opened from now on until :meth:`release`."""
        if self.holder is None:
            torch.autocast_increment_nesting()
            self.holder = threading.get_ident()

    def release(self) -> None:
        """Give the level back; clear the cache unless an autocast region is still open."""
        if self.holder is not None and self.holder == threading.get_ident():
            self.holder = None
            if torch.autocast_decrement_nesting() == 0:
                torch.clear_autocast_cache()
