"""Which source file is the user's: found by package location, never by a path substring.

A frame belongs to the user unless its file lies inside torch's installed package or inside
halfprec's own package. A user's checkout that happens to sit in a folder named ``halfprec``
is user code.
"""

from __future__ import annotations

import os
import traceback

import torch

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def is_library_file(filename: str) -> bool:
    """True for a file of torch or of halfprec itself."""
    path = os.path.abspath(filename)
    if path.startswith(_TORCH_DIR):
        return True
    return path.startswith(_PACKAGE_DIR)


def is_torch_file(filename: str) -> bool:
    """True for a file inside torch's installed package."""
    return os.path.abspath(filename).startswith(_TORCH_DIR)


def user_location() -> str | None:
    """``file:line`` of the innermost frame on the current stack that is the user's."""
    for frame in reversed(traceback.extract_stack()):
        if not is_library_file(frame.filename):
            return f"{frame.filename}:{frame.lineno}"
    return None
