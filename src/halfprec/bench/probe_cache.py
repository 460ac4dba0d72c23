"""The slow-dtype probe's verdicts, kept per machine in a small JSON file, so that the next
``bench`` or ``deploy`` on the same machine does not probe again.

Whether bf16 matrix products are emulated is a fact of the machine, not of the run: one
file per *machine key* (:func:`~halfprec.bench.machine.machine_key`: device and its name,
its half-precision features, architecture, torch version, thread count) holds the
:class:`~halfprec.bench.limit.Slowdown` of each dtype, probed product and threshold.

- Where: ``$HALFPREC_CACHE_DIR``, else ``$XDG_CACHE_HOME/halfprec``, else
  ``~/.cache/halfprec``; the file is ``probe-<hash of the key>.json``.
- Off: ``HALFPREC_PROBE_CACHE=0`` (or ``off``, ``false``, ``no``), ``BenchConfig(
  probe_cache=False)``, or ``halfprec bench --no-probe-cache``.
- Never trusted blindly: a file that is not exactly what this module writes (bad JSON,
  NaN, unknown or missing fields, wrong types, a verdict that contradicts its own numbers,
  another machine's key, over 1 MiB) is ignored with a note, the dtype is probed again, and
  the file is rewritten. The file holds numbers only; nothing in it is run.
- Writes are atomic; a cache that cannot be written is a note, never an error.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from halfprec.bench.limit import Gemm, Slowdown
from halfprec.cachefile import read_cache, write_cache
from halfprec.dtypes import HALF_DTYPES, dtype_name
from halfprec.readfile import FileTooLargeError, NotAFileError

ENV_DIR = "HALFPREC_CACHE_DIR"
ENV_SWITCH = "HALFPREC_PROBE_CACHE"
_OFF = ("0", "off", "false", "no")
_SCHEMA = 1
_MAX_BYTES = 1 << 20
_DTYPES = {dtype_name(d): d for d in HALF_DTYPES}  # as put() writes them: fp16, bf16
_FIELDS = {"dtype", "gemm", "give_up_at", "ratio", "low", "high", "rounds", "slow", "measured_at"}


def cache_dir() -> Path | None:
    """The folder of halfprec's per-machine caches, or None when ``HALFPREC_PROBE_CACHE``
    turns the probe cache off."""
    if os.environ.get(ENV_SWITCH, "").strip().lower() in _OFF:
        return None
    chosen = os.environ.get(ENV_DIR)
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "halfprec"


class _Malformed(ValueError):
    pass


def _number(entry: dict[str, Any], name: str) -> float:
    value = entry[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Malformed(f"{name} is {value!r}, not a finite number")
    return float(value)


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Malformed(f"{name} is {value!r}, not a positive integer")
    return value


_Key = tuple[torch.dtype, Gemm, float]


def _entry(entry: Any) -> tuple[_Key, Slowdown, str]:
    """One cached probe, checked field by field (``_Malformed`` says what is wrong)."""
    if not isinstance(entry, dict) or set(entry) != _FIELDS:
        got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise _Malformed(f"a probe entry has fields {got}, expected {sorted(_FIELDS)}")
    dtype = _DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
    if dtype is None:
        raise _Malformed(f"dtype is {entry['dtype']!r}, not one of {sorted(_DTYPES)}")
    dims = entry["gemm"]
    if not isinstance(dims, list) or len(dims) != 4:
        raise _Malformed(f"gemm is {dims!r}, not [batch, m, k, n]")
    gemm = Gemm(*(_count(d, "a gemm dimension") for d in dims))
    give_up_at, ratio = _number(entry, "give_up_at"), _number(entry, "ratio")
    low, high = _number(entry, "low"), _number(entry, "high")
    rounds = _count(entry["rounds"], "rounds")
    slow, when = entry["slow"], entry["measured_at"]
    if not isinstance(slow, bool) or not isinstance(when, str):
        raise _Malformed("slow must be true or false and measured_at a string")
    if not 0 <= low <= ratio <= high or give_up_at <= 0:
        raise _Malformed(f"need 0 <= low <= ratio <= high, got {low}, {ratio}, {high}")
    if slow != (low > give_up_at):
        raise _Malformed(f"slow={slow} contradicts low {low} against the limit {give_up_at}")
    return (dtype, gemm, give_up_at), Slowdown(dtype, ratio, low, high, rounds, slow), when


class ProbeCache:
    """The cached probes of one machine key in ``directory``. ``notes``: what was ignored or
    could not be written, for the run's warnings."""

    def __init__(self, directory: Path, key: dict[str, str | int]) -> None:
        self.key = key
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        self.path = directory / f"probe-{digest}.json"
        self.notes: list[str] = []
        self._entries: dict[_Key, tuple[Slowdown, str]] | None = None

    def _load(self) -> dict[_Key, tuple[Slowdown, str]]:
        if self._entries is None:
            try:
                self._entries = self._read()
            except FileNotFoundError:
                self._entries = {}
            except (OSError, UnicodeDecodeError, _Malformed) as exc:
                self.notes.append(
                    f"ignored the probe cache {self.path} ({exc}); probed again and rewrote it"
                )
                self._entries = {}
        return self._entries

    def _read(self) -> dict[_Key, tuple[Slowdown, str]]:
        def no_constants(name: str) -> Any:
            raise _Malformed(f"it holds {name}")

        try:
            # a regular file only (a FIFO would block, /dev/zero never end), read with a bound
            text = read_cache(self.path, limit=_MAX_BYTES).decode("utf-8")
            data = json.loads(text, parse_constant=no_constants)
        except FileTooLargeError:
            raise _Malformed(f"it is over {_MAX_BYTES} bytes") from None
        except NotAFileError as exc:
            raise _Malformed(f"it is {exc.kind}, not a regular file") from None
        except json.JSONDecodeError as exc:
            raise _Malformed(f"not JSON: {exc}") from None
        if not isinstance(data, dict) or set(data) != {"schema", "key", "probes"}:
            raise _Malformed("expected an object with schema, key and probes")
        if data["schema"] != _SCHEMA:
            raise _Malformed(f"schema {data['schema']!r}, expected {_SCHEMA}")
        if data["key"] != self.key:
            raise _Malformed("its machine key is not this machine's")
        if not isinstance(data["probes"], list):
            raise _Malformed("probes is not a list")
        entries = {}
        for raw in data["probes"]:
            key, slowdown, when = _entry(raw)
            entries[key] = (slowdown, when)
        return entries

    def get(self, dtype: torch.dtype, gemm: Gemm, give_up_at: float) -> tuple[Slowdown, str] | None:
        """The cached probe and when it was measured (ISO time, UTC), or None."""
        return self._load().get((dtype, gemm, float(give_up_at)))

    def put(self, probe: Slowdown, gemm: Gemm, give_up_at: float) -> None:
        """Keep ``probe`` (not cached when one of its numbers is not finite)."""
        if not all(math.isfinite(x) for x in (probe.ratio, probe.low, probe.high)):
            return
        entries = self._load()
        when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        entries[(probe.dtype, gemm, float(give_up_at))] = (probe, when)
        probes = [
            {
                "dtype": dtype_name(s.dtype),
                "gemm": [g.batch, g.m, g.k, g.n],
                "give_up_at": limit,
                "ratio": s.ratio,
                "low": s.low,
                "high": s.high,
                "rounds": s.rounds,
                "slow": s.slow,
                "measured_at": at,
            }
            for (_, g, limit), (s, at) in entries.items()
        ]
        text = json.dumps({"schema": _SCHEMA, "key": self.key, "probes": probes}, indent=1)
        try:
            write_cache(self.path, text + "\n")  # never through a link, in a folder only you write
        except OSError as exc:
            self.notes.append(f"could not write the probe cache {self.path}: {exc}")
