"""OpenVINO's usage telemetry held back while halfprec converts a model (:func:`no_telemetry`).

``openvino.convert_model`` reports its use to Google Analytics unless the user ran
``opt_in_out --opt_out`` (the ``openvino-telemetry`` package, a dependency of ``openvino``):
about a dozen events per conversion, each sent by a new process forked from the caller's
on Linux, so that a send that hangs without a network can be killed after 3 s. Forking a
process that holds a model costs more the larger it is: beside BERT-base the dozen forks
of one conversion took about 5 CPU seconds, half of the conversion's, on 2 cores (and the
processes they started outlived it). A conversion inside ``deploy`` or ``bench`` is
halfprec's step, not the user's use of OpenVINO, and nothing is sent for it; the user's
own conversions report as OpenVINO decides.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _Held:
    """How many blocks are inside :func:`no_telemetry`, across threads, and the sender's
    own ``send``, set aside by the first one in and put back by the last one out."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.send: Any = None


_HELD = _Held()


def _sender_class() -> Any:
    """The class every event of ``openvino_telemetry`` goes through, or None without it."""
    try:
        module = importlib.import_module("openvino_telemetry.utils.sender")
    except ImportError:
        return None
    cls = getattr(module, "TelemetrySender", None)
    return cls if callable(getattr(cls, "send", None)) else None


def _drop(self: Any, backend: Any, message: Any) -> None:
    """``TelemetrySender.send`` while held back: nothing is queued, forked or sent."""


@contextmanager
def no_telemetry() -> Iterator[None]:
    """While inside (in any thread), OpenVINO's telemetry sends nothing; on the way out its
    sender is the one it was, however the block ends (see the module docs). Without
    ``openvino-telemetry``, or with one whose sender is not where this looks, a no-op."""
    cls = _sender_class()
    if cls is None:
        yield
        return
    with _HELD.lock:
        if _HELD.count == 0:
            _HELD.send, cls.send = cls.send, _drop
        _HELD.count += 1
    try:
        yield
    finally:
        with _HELD.lock:
            _HELD.count -= 1
            if _HELD.count == 0:
                cls.send, _HELD.send = _HELD.send, None
