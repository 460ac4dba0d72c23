"""TorchScript files, for runtimes that still need them (C++ libtorch, older servers).

halfprec traces (``torch.jit.trace``) rather than scripts: tracing runs the Python
forward hooks, so the graph holds the input, island and output casts, while
``torch.jit.script`` ignores hooks registered with keyword arguments (halfprec's input and
island hooks are). ``torch.jit`` is deprecated
as of torch 2.13 in favour of ``torch.export``; prefer ``.pt2`` where the runtime allows.
A trace records one path through the model: shapes that reach Python
``if``s are fixed, which export checks by running the file on every example batch.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.errors import HalfprecError
from halfprec.export.capture import explain_failure
from halfprec.export.config import ExportError
from halfprec.export.info import INFO_KEY, ArtifactInfo
from halfprec.modules import first_line


def write_torchscript(
    model: nn.Module, named: dict[str, Any], path: Path, info: ArtifactInfo
) -> None:
    """Trace ``model`` on the keyword inputs ``named`` and save it to ``path``."""
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(
                model, example_kwarg_inputs=named, strict=False, check_trace=False
            )
    except HalfprecError:
        raise
    except Exception as exc:  # tracing raises many unrelated types
        raise ExportError(explain_failure("torch.jit.trace", exc)) from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates torch.jit
        buffer = io.BytesIO()  # torch's own file writer aborts the process on a write error
        torch.jit.save(traced, buffer, _extra_files={INFO_KEY: info.to_json_text()})
    path.write_bytes(buffer.getvalue())  # a full disk or file-size limit is an OSError here


def load_torchscript(path: Path) -> tuple[nn.Module, ArtifactInfo]:
    """The traced module and its metadata."""
    extra: dict[str, Any] = {INFO_KEY: ""}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
    except Exception as exc:  # a corrupt archive raises zipfile or torch errors
        raise ExportError(
            f"{path} is not a loadable TorchScript file ({first_line(exc)}); write it with "
            "halfprec export -o NAME.ts"
        ) from None
    if not extra[INFO_KEY]:
        raise ExportError(f"{path} was not written by halfprec export; re-export it with halfprec")
    return module, ArtifactInfo.from_json_text(extra[INFO_KEY], str(path))
