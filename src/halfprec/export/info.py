"""What halfprec stores inside every artifact it writes, so the file can be checked alone."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from halfprec.export.config import ExportError

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
        try:
            raw: dict[str, Any] = json.loads(text)
            shapes = raw.get("static_shapes")
            return cls(
                format=str(raw["format"]),
                dtype=str(raw["dtype"]),
                io_dtype=str(raw["io_dtype"]),
                model=str(raw.get("model", "")),
                params=tuple(raw["params"]),
                inputs=tuple(raw["inputs"]),
                outputs=tuple(raw["outputs"]),
                islands=dict(raw.get("islands", {})),
                static_shapes=(
                    None if shapes is None else {k: tuple(v) for k, v in shapes.items()}
                ),
                halfprec=str(raw.get("halfprec", "")),
                kv_cache=bool(raw.get("kv_cache", False)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ExportError(
                f"{source}: its halfprec metadata is unreadable ({exc}); re-export it with "
                "halfprec export"
            ) from None
