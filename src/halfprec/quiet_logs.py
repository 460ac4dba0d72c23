"""Torch's own log records held back while halfprec reports the outcome itself."""

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
