"""The exceptions halfprec raises for bad input. Each message names the problem and the fix.

The command line prints ``str(error)`` on one line and exits with ``error.exit_code`` (2).
"""

from __future__ import annotations

import re

__all__ = [
    "first_line",
    "clip",
    "HalfprecError",
    "DTypeError",
    "DeviceError",
    "ModelSpecError",
    "InputsError",
    "CheckpointError",
    "MissingExtraError",
]


class HalfprecError(Exception):
    """Base class: a user-facing error with a one-line message that says what to do."""

    exit_code: int = 2


class DTypeError(HalfprecError, ValueError):
    """An unknown dtype name, or a dtype the target device cannot run."""


class DeviceError(HalfprecError, ValueError):
    """A device that does not exist on this machine."""


class ModelSpecError(HalfprecError, ValueError):
    """A MODEL spec that cannot be resolved to an ``nn.Module``."""


class InputsError(HalfprecError, ValueError):
    """Example inputs that are missing, unreadable or do not fit the model."""


class CheckpointError(HalfprecError, ValueError):
    """A checkpoint that is missing, corrupt, unsafe, or does not match the model."""


class MissingExtraError(HalfprecError, ImportError):
    """An optional dependency is not installed."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the package '{package}', which is not installed; "
            f"install it with: pip install 'halfprec[{extra}]'"
        )
        self.package = package
        self.extra = extra


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clip(text: str, limit: int = 240) -> str:
    """``text`` shortened to at most ``limit`` characters at a word boundary, with "..."."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 3].rsplit(" ", 1)[0].rstrip(" ,;:(")
    return f"{cut}..."


def first_line(message: object, limit: int = 240) -> str:
    """The first non-empty line of ``str(message)``, without ANSI colour codes, clipped
    at a word boundary. For an exception with an empty message, its type name."""
    text = _ANSI.sub("", str(message))
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not line and isinstance(message, BaseException):
        line = type(message).__name__
    return clip(line, limit)
