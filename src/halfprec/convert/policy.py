"""Conversion policies: the dtype and the fp32 islands, saved as JSON so that tuning runs
once and deployment reads the result (``convert(model, policy="policy.json")``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from halfprec.atomic import write_text_atomic
from halfprec.convert.op_islands import OpRef
from halfprec.dtypes import dtype_name, parse_dtype
from halfprec.errors import HalfprecError

__all__ = ["Policy", "PolicyError"]

_FORMAT = "halfprec-policy/1"


class PolicyError(HalfprecError, ValueError):
    """A policy file that is missing or malformed."""


@dataclass(frozen=True)
class Policy:
    """Which dtype to convert to, which modules (qualified names) stay in fp32, and which
    single ops inside a module's own code compute in fp32 (``op_islands``)."""

    dtype: torch.dtype
    keep_fp32: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)
    op_islands: tuple[OpRef, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        if isinstance(self.keep_fp32, str) or not all(isinstance(n, str) for n in self.keep_fp32):
            raise PolicyError("Policy.keep_fp32 must be a list of qualified module names")
        object.__setattr__(self, "keep_fp32", tuple(self.keep_fp32))
        ops = tuple(self.op_islands)
        if not all(isinstance(o, OpRef) for o in ops):
            raise PolicyError("Policy.op_islands must be OpRef(module, op, location, occurrence)")
        object.__setattr__(self, "op_islands", tuple(sorted(set(ops))))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "dtype": dtype_name(self.dtype),
            "keep_fp32": list(self.keep_fp32),
            "op_islands": [o.to_json() for o in self.op_islands],
            "info": self.info,
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        write_text_atomic(path, json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Policy:
        p = Path(path)
        if not p.is_file():
            raise PolicyError(f"policy file {p} not found; create one with `halfprec tune`")
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PolicyError(
                f"policy file {p} is not valid JSON ({exc}); re-run `halfprec tune`"
            ) from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise PolicyError(
                f'{p} is not a halfprec policy (expected "format": "{_FORMAT}"); '
                "write one with `halfprec tune -o policy.json`"
            )
        try:
            return cls(
                dtype=data["dtype"],
                keep_fp32=tuple(data.get("keep_fp32", ())),
                info=dict(data.get("info", {})),
                op_islands=tuple(OpRef.from_json(o) for o in data.get("op_islands", ())),
            )
        except (KeyError, TypeError, ValueError, HalfprecError) as exc:
            raise PolicyError(f"policy file {p} is malformed: {exc}") from None
