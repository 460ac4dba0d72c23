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


def load_weights_only(path: Path | BinaryIO) -> Any:
    """Load ``path`` (or an open file: :func:`halfprec.readfile.open_regular`) with
    ``weights_only=True``; refuse anything that would run code."""
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
