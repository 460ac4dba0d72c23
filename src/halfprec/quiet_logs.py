"""Log state around the libraries halfprec calls: torch's own records held back while
halfprec reports the outcome itself, and the root logger kept as the caller set it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_logs(*names: str, level: int = logging.ERROR) -> Iterator[None]:
    """While inside: the loggers ``names`` pass only records of ``level`` or above; each
    logger's own level is restored on the way out.

    Why: torch.export's symbolic-shape warnings print whole graphs (1000+ lines) before the
    exception halfprec turns into one line, and torch.onnx logs notices that are not ours.
    """
    loggers = [logging.getLogger(name) for name in names]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(level)
    try:
        yield
    finally:
        for log, old in zip(loggers, levels, strict=True):
            log.setLevel(old)


@contextmanager
def root_logger_kept() -> Iterator[None]:
    """The root logger's level, filters and handlers as they were on the way in, however
    the block ends.

    Why: OpenVINO's ``convert_model`` sets the root logger to ERROR, adds a filter and,
    where the root has no handler, a handler of its own, and restores them only when it
    succeeds; a model it cannot convert would leave the caller's own warnings silenced.
    """
    root = logging.getLogger()
    level, filters, handlers = root.level, list(root.filters), list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.filters[:] = filters
        root.handlers[:] = handlers
