"""``torch.load`` restricted to tensors and plain containers (``weights_only=True``)."""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path
from typing import Any, BinaryIO

import torch

_GLOBAL = re.compile(r"(?:Unsupported global: GLOBAL|global) ([\w.]+)")


class UnsafePickleError(Exception):
    """The file needs more than tensors to unpickle; ``detail`` names what it asked for."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotATorchFileError(RuntimeError):
    """The bytes are not a ``torch.save`` file (a text file named ``.pt``, ...). A
    RuntimeError, as torch's own "not a zip archive" error is, so one handler takes both."""


_ZIP, _PICKLE = b"PK", b"\x80"  # torch.save's zip format; the legacy format's pickle header


def load_weights_only(path: Path | BinaryIO) -> Any:
    """Load ``path`` (or an open file: :func:`halfprec.readfile.open_regular`) with
    ``weights_only=True``; refuse anything that would run code, and bytes that are not a
    torch file (:class:`NotATorchFileError`: the unpickler's own errors on them are a
    ``KeyError`` or worse)."""
    _check_header(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # protocol-version chatter from the safe unpickler
        try:
            return torch.load(
                path if not isinstance(path, Path) else str(path),
                map_location="cpu",
                weights_only=True,
            )
        except pickle.UnpicklingError as exc:
            found = _GLOBAL.search(str(exc))
            detail = f"it asks for {found.group(1)}" if found else "it holds objects or code"
            raise UnsafePickleError(detail) from None
        except (KeyError, IndexError, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise NotATorchFileError(f"not a torch.save file: {exc!r}") from None


def _check_header(path: Path | BinaryIO) -> None:
    if isinstance(path, Path):
        with open(path, "rb") as f:
            head = f.read(2)
    else:
        where = path.tell()
        head = path.read(2)
        path.seek(where)
    if not head.startswith((_ZIP, _PICKLE)):
        shown = head.decode("latin-1").encode("unicode_escape").decode()
        raise NotATorchFileError(f"not a torch.save file: it starts with {shown!r}")
