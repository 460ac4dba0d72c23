"""What halfprec stores inside every artifact it writes, so the file can be checked alone."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from halfprec.export.config import FORMATS, ExportError

__all__ = ["ArtifactInfo", "INFO_KEY"]

INFO_KEY = "halfprec.json"


@dataclass(frozen=True)
class ArtifactInfo:
    """Metadata of an exported artifact.

    ``params``: the forward parameter names that positional inputs bind to;
    ``inputs``/``outputs``: dotted tensor paths in artifact order (ONNX input and output
    names); ``io_dtype``: what floating inputs and outputs are (``fp32`` unless half IO);
    ``static_shapes``: input shapes when the artifact was exported for fixed shapes;
    ``kv_cache``: exported with its KV cache as tensors (:mod:`halfprec.export.kv_cache`).
    """

    format: str
    dtype: str
    io_dtype: str
    model: str
    params: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    islands: dict[str, str] = field(default_factory=dict)
    static_shapes: dict[str, tuple[int, ...]] | None = None
    halfprec: str = ""
    kv_cache: bool = False

    def to_json_text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json_text(cls, text: str | bytes, source: str) -> ArtifactInfo:
        """Parse and validate stored metadata: every field's type and range is checked
        before use, so a crafted file is one :class:`ExportError`, never a traceback."""
        try:
            raw = json.loads(text)
        except (ValueError, TypeError) as exc:
            raise _unreadable(source, f"not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise _unreadable(source, f"a JSON {type(raw).__name__}, not an object")
        for key in ("format", "dtype", "io_dtype", "params", "inputs", "outputs"):
            if key not in raw:
                raise _unreadable(source, f"no {key!r} field")
        fields: dict[str, Any] = {}
        for key, check in _FIELDS.items():
            if key in raw:
                value, problem = check(raw[key])
                if problem:
                    raise _unreadable(source, f"{key!r} {problem}, got {str(raw[key])[:60]}")
                fields[key] = value
        return cls(**fields)


def _unreadable(source: str, why: str) -> ExportError:
    return ExportError(
        f"{source}: its halfprec metadata is unreadable ({why}); re-export it with halfprec export"
    )


Checked = tuple[Any, str | None]


def _one_of(*allowed: str) -> Callable[[Any], Checked]:
    def check(v: Any) -> Checked:
        return v, None if v in allowed else f"must be one of {', '.join(allowed)}"

    return check


def _text(v: Any) -> Checked:
    return v, None if isinstance(v, str) else "must be a string"


def _names(v: Any) -> Checked:
    ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
    return (tuple(v) if ok else v), None if ok else "must be a list of strings"


def _islands(v: Any) -> Checked:
    ok = isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
    return v, None if ok else "must map module names to strings"


def _shapes(v: Any) -> Checked:
    if v is None:
        return None, None
    ok = isinstance(v, dict) and all(
        isinstance(dims, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims)
        for dims in v.values()
    )
    if not ok:
        return v, "must map input names to lists of sizes >= 0, or be null"
    return {k: tuple(dims) for k, dims in v.items()}, None


def _flag(v: Any) -> Checked:
    return v, None if isinstance(v, bool) else "must be true or false"


_DTYPES = ("fp32", "fp16", "bf16")
_FIELDS: dict[str, Callable[[Any], Checked]] = {
    "format": _one_of(*FORMATS),
    "dtype": _one_of(*_DTYPES),
    "io_dtype": _one_of(*_DTYPES),
    "model": _text,
    "params": _names,
    "inputs": _names,
    "outputs": _names,
    "islands": _islands,
    "static_shapes": _shapes,
    "halfprec": _text,
    "kv_cache": _flag,
}
