"""``.pt2`` files: a ``torch.export`` program with halfprec's metadata inside.

The program holds the half weights, the fp32 island weights, and every cast halfprec's
hooks make (inputs to half, islands to fp32 and back, outputs to fp32), as graph nodes.
Loading goes through :func:`~halfprec.export.safe_pt2.vetted_archive`, so a crafted file
cannot run code (``torch.export.load`` alone would unpickle and ``eval`` parts of it).
"""

from __future__ import annotations

import io
from pathlib import Path

import torch
from torch import nn

from halfprec.export.config import ExportError
from halfprec.export.info import INFO_KEY, ArtifactInfo
from halfprec.export.safe_pt2 import vetted_archive
from halfprec.modules import first_line
from halfprec.quiet_logs import quiet_logs


def write_exported_program(
    program: torch.export.ExportedProgram, path: Path, info: ArtifactInfo
) -> None:
    """Save ``program`` to ``path`` (the caller makes the write atomic)."""
    buffer = io.BytesIO()  # torch.export.save wants a .pt2 name; the atomic temp file is not
    torch.export.save(program, buffer, extra_files={INFO_KEY: info.to_json_text()})
    path.write_bytes(buffer.getvalue())


def load_exported_program(path: Path) -> tuple[nn.Module, ArtifactInfo]:
    """The program's callable module and its metadata."""
    extra: dict[str, str] = {INFO_KEY: ""}
    try:
        with quiet_logs("torch.export"):  # a bad file is reported below, not logged
            program = torch.export.load(vetted_archive(path), extra_files=extra)
    except ExportError:
        raise
    except Exception as exc:  # a corrupt archive raises zipfile, JSON or torch errors
        raise ExportError(
            f"{path} is not a loadable torch.export file ({first_line(exc)}); write it with "
            "torch.export.save or halfprec export"
        ) from None
    if not extra[INFO_KEY]:
        raise ExportError(f"{path} was not written by halfprec export; re-export it with halfprec")
    # check_guards=False: no guard code is generated from strings in the file
    info = ArtifactInfo.from_json_text(extra[INFO_KEY], str(path))
    return program.module(check_guards=False), info
