"""The caller's objects set aside from the garbage collector while a benchmark runs
(:func:`caller_objects_set_aside`).

A full collection walks every object the process tracks: beside transformers, torch's
compiler and a model, 400 to 650 thousand, a few tenths of a second each on one core. A
benchmark runs one per candidate it releases (:meth:`~halfprec.bench.runner.Benchmark.
_release`), and the compiler's allocations set off more. What it frees is the benchmark's
own: the candidates, their calls' outputs, the compiler's graphs. So the objects that
existed before it began are frozen (:func:`gc.freeze`: collections skip them, which is
all it changes) for the run and unfrozen after it, however it ends; one of them left
unreachable meanwhile is collected by the first collection after. Where the caller froze
objects of its own (a fork server), nothing is frozen or unfrozen: the caller's freeze is
not ours to undo.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def caller_objects_set_aside() -> Iterator[None]:
    """While inside, collections skip the objects tracked on the way in (see the module
    docs); on the way out none is frozen, as none was."""
    if gc.get_freeze_count() > 0:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
