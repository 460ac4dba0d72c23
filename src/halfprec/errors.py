"""The exceptions halfprec raises for bad input. Each message names the problem and the fix.

The command line prints ``str(error)`` on one line and exits with ``error.exit_code`` (2).
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType

# import name -> the name pip installs it by, where the two differ
_PACKAGES = {"sklearn": "scikit-learn"}


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


class ReferenceFailedError(InputsError):
    """The fp32 model raised on example batch ``index`` (described by ``batch``) with the
    model's own message ``why``. Its message advises the user on inputs they passed;
    :meth:`built_by_halfprec` words it for inputs halfprec built itself."""

    def __init__(self, index: int, batch: str, why: str) -> None:
        super().__init__(
            f"the fp32 model failed on batch {index} ({batch}) with {why}; check the inputs' "
            "names, shapes and dtypes against the model's forward()"
        )
        self.index, self.batch, self.why = index, batch, why

    def built_by_halfprec(self, built: str) -> str:
        """The one line for example inputs halfprec built (``built``: from what)."""
        return (
            f"the fp32 model refuses the example inputs halfprec built for it ({built}; "
            f"batch {self.index}: {self.batch}): {self.why} These inputs are halfprec's, not "
            "yours: pass inputs of your own with --inputs FILE (.safetensors or .pt)"
        )


class BrokenReferenceError(HalfprecError, ValueError):
    """The fp32 reference output holds inf/NaN, so no half result can be judged against it."""


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


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import the optional dependency ``module`` (``"onnx"``, ``"matplotlib.figure"``) or
    raise :class:`MissingExtraError` naming ``pip install 'halfprec[extra]'`` and
    ``purpose``, what it is needed for."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.partition(".")[0]
        raise MissingExtraError(_PACKAGES.get(top, top), extra, purpose) from None


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clip(text: str, limit: int = 240) -> str:
    """``text`` shortened to at most ``limit`` characters at a word boundary, with "..."."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 3].rsplit(" ", 1)[0].rstrip(" ,;:(")
    return f"{cut}..."


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (torch.onnx colours its summaries)."""
    return _ANSI.sub("", text)
