"""Pass thresholds for a comparison against fp32, whose defaults follow the run's dtype.

``Tolerance()`` leaves every threshold at the default of the dtype it is applied to:
cosine >= 0.999 for both half dtypes, SQNR >= 25 dB for fp16 (11 significant bits) and
>= 20 dB for bf16 (8 bits). A threshold given explicitly is kept as given, so
``Tolerance(min_cosine=0.9999)`` in a bf16 run demands bf16's SQNR, not fp16's.
``None`` switches a threshold off. :meth:`Tolerance.resolve` fills in the defaults.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from numbers import Real
from typing import Any

import torch

from halfprec.dtypes import dtype_name

__all__ = ["Tolerance", "DEFAULT"]


class _Default(float):
    """The marker of a threshold left to the dtype's default (a float, so it types as one)."""

    def __repr__(self) -> str:
        return "DEFAULT"

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_default, ())  # one marker: copies and pickles are DEFAULT itself

    def __copy__(self) -> _Default:
        return self

    def __deepcopy__(self, memo: Any) -> _Default:
        return self


DEFAULT: float = _Default("nan")


def _default() -> float:
    return DEFAULT


# per dtype: (min_cosine, min_sqnr_db, max_rel_error, min_argmax_agreement)
_DEFAULTS: dict[torch.dtype | None, tuple[float | None, ...]] = {
    torch.float16: (0.999, 25.0, None, None),
    torch.bfloat16: (0.999, 20.0, None, None),
    None: (0.999, 25.0, None, None),  # no dtype known: the stricter (fp16) values
}
_FIELDS = ("min_cosine", "min_sqnr_db", "max_rel_error", "min_argmax_agreement")


def is_default(value: Any) -> bool:
    return isinstance(value, _Default)


@dataclass(frozen=True)
class Tolerance:
    """Pass thresholds for one output. ``None`` disables a threshold; a threshold left out
    takes the default of the dtype the tolerance is applied to (see the module docs).
    inf/NaN in the half output where fp32 is finite always fail."""

    min_cosine: float | None = DEFAULT
    min_sqnr_db: float | None = DEFAULT
    max_rel_error: float | None = DEFAULT
    min_argmax_agreement: float | None = DEFAULT

    def __post_init__(self) -> None:
        for name in _FIELDS:
            value = getattr(self, name)
            if value is None or is_default(value):
                continue
            if isinstance(value, bool) or not isinstance(value, Real):
                raise ValueError(f"Tolerance({name}={value!r}): {name} must be a number or None")
            if math.isnan(value):
                raise ValueError(
                    f"Tolerance({name}=nan): a NaN threshold would pass every value; give a "
                    "number, or None to turn the check off"
                )
            object.__setattr__(self, name, float(value))
        cos = self.min_cosine
        if cos is not None and not is_default(cos) and not -1.0 <= cos <= 1.0:
            raise ValueError(f"min_cosine must be in [-1, 1], got {cos}")
        rel = self.max_rel_error
        if rel is not None and not is_default(rel) and rel < 0:
            raise ValueError(f"max_rel_error must be >= 0, got {rel}")
        agree = self.min_argmax_agreement
        if agree is not None and not is_default(agree) and not 0.0 <= agree <= 1.0:
            raise ValueError(f"min_argmax_agreement must be in [0, 1], got {agree}")

    @classmethod
    def for_dtype(cls, dtype: torch.dtype | None) -> Tolerance:
        """The defaults of ``dtype`` (``None``: fp16's, the stricter), all filled in."""
        return cls().resolve(dtype)

    def resolve(self, dtype: torch.dtype | None) -> Tolerance:
        """This tolerance with every threshold left to the default set to ``dtype``'s."""
        defaults = _DEFAULTS.get(dtype, _DEFAULTS[None])
        changes = {
            name: default
            for name, default in zip(_FIELDS, defaults, strict=True)
            if is_default(getattr(self, name))
        }
        return dataclasses.replace(self, **changes) if changes else self

    @property
    def resolved(self) -> bool:
        return not any(is_default(getattr(self, n)) for n in _FIELDS)

    def to_json(self) -> dict[str, float | str | None]:
        """Explicit thresholds as numbers, switched-off ones as null, defaults as "default"."""
        return {n: "default" if is_default(v) else v for n in _FIELDS for v in [getattr(self, n)]}

    @classmethod
    def from_json(cls, data: Any) -> Tolerance:
        if not isinstance(data, dict) or set(data) - set(_FIELDS):
            raise ValueError(
                f"a tolerance is an object with the keys {', '.join(_FIELDS)}, got {data!r}"
            )
        values: dict[str, Any] = {}
        for name in _FIELDS:
            v = data.get(name, "default")
            values[name] = DEFAULT if v == "default" else v
        return cls(**values)

    def describe(self, dtype: torch.dtype | None) -> str:
        t = self.resolve(dtype)
        parts = [f"{n}={getattr(t, n):g}" for n in _FIELDS if getattr(t, n) is not None]
        where = dtype_name(dtype) if dtype is not None else "any dtype"
        return f"{', '.join(parts) or 'no thresholds'} ({where})"
