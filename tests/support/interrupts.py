"""Ctrl-C at the worst moment of a write, in this process: just after the system call that
made a ``.halfprec-*`` temp file or folder returned, before any code after it ran."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def interrupt_once_made(monkeypatch: pytest.MonkeyPatch, make: str) -> None:
    """``os.<make>`` (``open`` or ``mkdir``) makes a halfprec temp, then raises
    KeyboardInterrupt, as a signal's handler does at that moment."""
    real = getattr(os, make)

    def made_then_interrupted(path: Any, *args: Any, **kwargs: Any) -> Any:
        made = real(path, *args, **kwargs)
        if Path(path).name.startswith(".halfprec-"):
            raise KeyboardInterrupt
        return made

    monkeypatch.setattr(os, make, made_then_interrupted)
