"""deploy's race outcomes, kept per machine and model shape, so that a repeat ``deploy`` of
the same model on the same machine builds and times only the variant that won (and eager
fp32, the reference), instead of compiling every candidate again.

- Key: the machine (:func:`~halfprec.bench.machine.machine_key`: device, its name and
  half-precision features, torch's version, threads), the model's class, parameter count
  and dtypes, the example batch's tensor shapes and dtypes, and the candidate variants.
- Where: the probe cache's folder (:func:`~halfprec.bench.probe_cache.cache_dir`), file
  ``race-<hash of the key>.json``; off with ``HALFPREC_RACE_CACHE=0`` (or ``off``,
  ``false``, ``no``) or with the probe cache switched off.
- Never trusted blindly: the winner is checked against fp32 and timed again every time;
  when it no longer passes or no longer beats fp32 beyond the spread, deploy races every
  candidate again and rewrites the file. A file that is not a small regular file of
  exactly this shape (a FIFO, a device, over 64 KiB, other fields, another key) is ignored.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch
from halfprec.bench.machine import machine_key
from halfprec.bench.probe_cache import cache_dir
from halfprec.bench.variants import Variant
from halfprec.cachefile import read_cache, write_cache
from halfprec.tree import flatten

ENV_SWITCH = "HALFPREC_RACE_CACHE"
_OFF = ("0", "off", "false", "no")
_MAX_BYTES = 1 << 16
_FIELDS = {"key", "winner", "measured_at"}


def race_key(model: nn.Module, batch: Batch, variants: Sequence[Variant]) -> dict[str, Any]:
    """What a race's outcome depends on, as JSON values (see the module docs)."""
    params = list(model.parameters())
    dtypes = sorted({str(p.dtype) for p in params})
    inputs = {path: [list(t.shape), str(t.dtype)] for path, t in flatten(batch).items()}
    device = params[0].device if params else torch.device("cpu")
    return {
        "machine": machine_key(device),
        "model": f"{type(model).__module__}.{type(model).__qualname__}",
        "parameters": sum(p.numel() for p in params),
        "dtypes": dtypes,
        "inputs": inputs,
        "variants": [v.name for v in variants],
    }


def _read_small(path: Path) -> str | None:
    """The file's text when it is a regular file (not a link) of at most 64 KiB, else None
    (:func:`~halfprec.cachefile.read_cache`: a FIFO or device is never read)."""
    try:
        return read_cache(path, limit=_MAX_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


class RaceCache:
    """The cached winner of one race key, or None where the cache is off."""

    def __init__(self, key: dict[str, Any], directory: Path | None = None) -> None:
        self.key = key
        folder = directory if directory is not None else cache_dir()
        switched_off = os.environ.get(ENV_SWITCH, "").strip().lower() in _OFF
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        self.path = None if folder is None or switched_off else folder / f"race-{digest}.json"

    def get(self) -> tuple[str, str] | None:
        """The winner's variant name and when it won (ISO time, UTC), or None."""
        text = None if self.path is None else _read_small(self.path)
        if text is None:
            return None
        try:
            data = json.loads(text, parse_constant=lambda name: None)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or set(data) != _FIELDS or data["key"] != self.key:
            return None
        winner, when = data["winner"], data["measured_at"]
        if not (isinstance(winner, str) and winner in self.key["variants"]):
            return None
        return (winner, when) if isinstance(when, str) else None

    def put(self, winner: str) -> str | None:
        """Keep ``winner``; a note when the file could not be written."""
        if self.path is None:
            return None
        when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        text = json.dumps({"key": self.key, "winner": winner, "measured_at": when}, indent=1)
        try:
            write_cache(self.path, text + "\n")  # never through a link, in a folder only you write
        except OSError as exc:
            return f"could not write deploy's race cache {self.path}: {exc}"
        return None
