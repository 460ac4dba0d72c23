"""The recipe: everything halfprec decides about converting one model, in one frozen object.

A :class:`Recipe` holds the dtype, the module islands (``keep_fp32``), the op islands, the
boundary behaviour (fill saturation, guards, output casting, mixed kernels) and the
tolerance a check applies, whose defaults follow the recipe's dtype. It is validated on
construction and round-trips through JSON exactly (:meth:`Recipe.to_json`,
:meth:`Recipe.from_json`, :meth:`Recipe.save`, :meth:`Recipe.load`).

Type selectors in ``keep_fp32`` and a ``filter_fn`` are conveniences that cannot be
saved: when the recipe meets a model (:func:`halfprec.convert`), they are resolved into the
module names they select, and the converted model carries that *resolved* recipe
(:func:`halfprec.convert.recipe_of`), which lists every island by name. That is what
checkpoints store, so ``halfprec.load`` rebuilds exactly the converted model, whatever its
weights.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.atomic import write_text_atomic
from halfprec.convert.op_islands import OpRef
from halfprec.convert.op_policy import DEFAULT_FP32_OPS
from halfprec.dtypes import (
    DTypeChoice,
    DTypeLike,
    candidate_dtypes,
    dtype_name,
    is_auto,
    parse_dtype,
    resolve_dtype,
)
from halfprec.errors import HalfprecError, clip
from halfprec.modules import first_line
from halfprec.readfile import read_text_regular, refusal
from halfprec.tolerance import Tolerance
from halfprec.tree import nesting_depth

__all__ = [
    "INFO_DEPTH",
    "SMALL_PARAMS",
    "FilterFn",
    "Recipe",
    "RecipeError",
    "RecipeLike",
    "Selector",
    "Settled",
]

FORMAT = "halfprec-recipe/1"
_OLD_POLICY = "halfprec-policy/1"  # written by `halfprec tune` before the recipe

INFO_DEPTH = 16  # Recipe.info nests at most this deep: every renderer walks it recursively
_FILE_LIMIT = 16 * 2**20  # a recipe file is a few KB; a bigger one is refused unread

SMALL_PARAMS = 65536  # default Recipe.fp32_params_up_to: 256 KB of fp32 per tensor at most

FilterFn = Callable[[nn.Module, str], bool]
Selector = type[nn.Module] | str

_FLAGS = (
    "norm_islands",
    "saturate_fills",
    "guard_boundaries",
    "cast_outputs",
    "mixed_kernels",
    "fp32_inputs",
)


class RecipeError(HalfprecError, ValueError):
    """A recipe (file or JSON) that is missing or malformed."""


@dataclass(frozen=True)
class Settled:
    """What a recipe means for one verb on one device (:meth:`Recipe.settle`): the dtypes
    to try, and the tolerance every one of them is judged by. The one home of the rule "an
    explicit tolerance, else the recipe's"."""

    dtypes: tuple[torch.dtype, ...]
    tolerance: Tolerance

    def judge(self, dtype: torch.dtype | None) -> Tolerance:
        """The tolerance for ``dtype``, its left-out thresholds set to that dtype's defaults
        (``None``: fp16's, the stricter, where several dtypes share one verdict)."""
        return self.tolerance.resolve(dtype)


@dataclass(frozen=True)
class Recipe:
    """How to convert a model. Every verb takes one: ``convert(model, recipe)``,
    ``check(model, inputs, recipe)``, ``tune(model, inputs, recipe)``, ... A dtype string
    (``"bf16"``) stands for ``Recipe(dtype="bf16")``.

    - ``dtype``: ``"fp16"``, ``"bf16"``, a ``torch.dtype``, or ``"auto"`` (the device's
      choice, resolved once when the recipe meets a model).
    - ``keep_fp32``: module names (``fnmatch`` globs) or module types kept in fp32, on top
      of the norm islands (``norm_islands=False`` drops those).
    - ``op_islands``: single ops computed in fp32, or GEMMs computed in half on operands
      scaled by powers of two (:class:`~halfprec.convert.OpRef`, ``kind="scaled"``).
    - ``fp32_outputs``: module islands, or modules with op islands, whose fp32 outputs are
      handed on in fp32 instead of narrowed to the half dtype where they fit (a
      probability of 0.99999 that the next module turns into ``log(1 - p)``); the next
      half module or GEMM that consumes one casts it, as it casts fp32 inputs.
    - ``fp32_ops``: torch ops computed in fp32 wherever the model calls them with a half
      operand (:mod:`halfprec.convert.op_policy`; default: autocast's fp32 list plus the
      ops with no half kernel; ``()`` turns it off).
    - ``saturate_fills``: fill constants beyond the half range become its finite limit.
    - ``guard_boundaries``: half modules cast fp32 tensors made inside ``forward``.
    - ``cast_outputs``: floating outputs come back in the model's original dtype.
    - ``fp32_inputs``: floating inputs enter the model in fp32, and the first half module or
      GEMM that consumes them casts them, as under autocast (so the ops before it, on
      coordinates, positions or waveforms, see the values as given); False casts them at
      the root.
    - ``fp32_params_up_to``: parameters and buffers that no GEMM-type module owns (a
      learned scale, frequencies, a centre, a temperature) stay fp32 when they hold at most
      this many values, as autocast keeps every parameter fp32; the weights of Linear,
      Conv, Embedding, MultiheadAttention, Bilinear, RNN and transformers' Conv1D modules
      (:data:`~halfprec.convert.kinds.GEMM_TYPES`), scripted modules' and larger tensors go
      half. ``0``: every floating parameter goes half (recipes saved before this field
      load that way).
    - ``mixed_kernels``: built-in norm islands take half input straight into their fp32
      kernels where the device supports it; ``False`` always casts (ONNX needs one dtype
      per op).
    - ``tolerance``: what a check against fp32 demands; thresholds left out follow the
      dtype (:class:`~halfprec.Tolerance`).
    - ``filter_fn(module, name) -> bool``: True keeps that module in fp32 (not saved:
      resolved into ``keep_fp32`` names at conversion).
    - ``info``: provenance (who made the recipe, on what), JSON values only.
    """

    dtype: DTypeLike = "auto"
    keep_fp32: tuple[Selector, ...] = ()
    op_islands: tuple[OpRef, ...] = ()
    fp32_outputs: tuple[str, ...] = ()
    fp32_ops: tuple[str, ...] = DEFAULT_FP32_OPS
    norm_islands: bool = True
    saturate_fills: bool = True
    guard_boundaries: bool = True
    cast_outputs: bool = True
    mixed_kernels: bool = True
    fp32_inputs: bool = True
    fp32_params_up_to: int = SMALL_PARAMS
    tolerance: Tolerance = field(default_factory=Tolerance)
    filter_fn: FilterFn | None = field(default=None, compare=False)
    info: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        dtype: Any = self.dtype
        if dtype is None or is_auto(dtype):
            object.__setattr__(self, "dtype", "auto")
        else:
            object.__setattr__(self, "dtype", parse_dtype(dtype))
        keep: Any = self.keep_fp32
        if isinstance(keep, (str, type)):
            keep = (keep,)
        keep = tuple(keep)
        for sel in keep:
            if not (isinstance(sel, str) or (isinstance(sel, type) and issubclass(sel, nn.Module))):
                raise ValueError(
                    f"keep_fp32 entries must be module types or qualified names, got {sel!r}; "
                    "pass filter_fn=lambda module, name: ... for anything else"
                )
        object.__setattr__(self, "keep_fp32", keep)
        ops = tuple(self.op_islands)
        if not all(isinstance(o, OpRef) for o in ops):
            raise ValueError("op_islands must be OpRef(module, op, location, occurrence) entries")
        ops = tuple(sorted(set(ops), key=_op_order))
        kinds: dict[tuple[str, str, str, int], str] = {}
        for o in ops:
            if kinds.setdefault(o.site, o.kind) != o.kind:
                raise ValueError(
                    f"op_islands name {o} both as 'fp32' and as 'scaled'; keep one of the two"
                )
        object.__setattr__(self, "op_islands", ops)
        outs: Any = self.fp32_outputs
        if isinstance(outs, str) or not all(isinstance(n, str) and n for n in outs):
            raise ValueError(
                f"fp32_outputs must be a sequence of module names, got {outs!r}; name the "
                'islands whose outputs stay fp32, e.g. fp32_outputs=("block.gate",)'
            )
        object.__setattr__(self, "fp32_outputs", tuple(sorted(set(outs))))
        names: Any = self.fp32_ops
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"fp32_ops must be a sequence of torch op names, got {names!r}")
        object.__setattr__(self, "fp32_ops", tuple(sorted(set(names))))
        for flag in _FLAGS:
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise ValueError(f"Recipe.{flag} must be True or False, got {value!r}")
        up_to = self.fp32_params_up_to
        if isinstance(up_to, bool) or not isinstance(up_to, int) or up_to < 0:
            raise ValueError(
                f"Recipe.fp32_params_up_to must be a count of values >= 0, got {up_to!r}; "
                "0 makes every floating parameter half"
            )
        if not isinstance(self.tolerance, Tolerance):
            raise ValueError(f"Recipe.tolerance must be a Tolerance, got {self.tolerance!r}")
        if self.filter_fn is not None and not callable(self.filter_fn):
            raise ValueError("filter_fn must be callable as filter_fn(module, qualified_name)")
        if not isinstance(self.info, Mapping):
            raise ValueError(f"Recipe.info must be a mapping, got {type(self.info).__name__}")
        if nesting_depth(dict(self.info), INFO_DEPTH) > INFO_DEPTH:
            raise ValueError(
                f"Recipe.info nests lists and objects more than {INFO_DEPTH} deep; keep "
                "provenance flat (names, versions, numbers)"
            )

    # -- what the recipe stands for ---------------------------------------------------------
    @classmethod
    def of(cls, recipe: RecipeLike) -> Recipe:
        """The recipe ``recipe`` stands for: ``None`` is ``Recipe()``, a dtype (``"bf16"``,
        ``torch.float16``, ``"auto"``) is ``Recipe(dtype=...)``, a path is
        :meth:`Recipe.load` of it."""
        if recipe is None:
            return cls()
        if isinstance(recipe, cls):
            return recipe
        if isinstance(recipe, torch.dtype):
            return cls(dtype=recipe)
        if isinstance(recipe, str) and not (recipe.endswith(".json") or Path(recipe).is_file()):
            return cls(dtype=recipe)  # a dtype name; an unknown one is refused as a dtype
        if isinstance(recipe, (str, os.PathLike)):
            return cls.load(recipe)
        raise TypeError(
            f'expected a Recipe, a dtype ("fp16", "bf16", "auto", torch.float16), the path '
            f"of a recipe JSON, or None, got {type(recipe).__name__}; pass options as "
            "Recipe(dtype=..., keep_fp32=...)"
        )

    @property
    def requested(self) -> DTypeLike:
        """The dtype asked for: a ``torch.dtype`` or ``"auto"``."""
        return self.dtype

    def resolve(self, device: str | torch.device = "cpu") -> DTypeChoice:
        """The compute dtype on ``device`` and why (``"auto"`` resolved by
        :func:`~halfprec.dtypes.resolve_dtype`)."""
        return resolve_dtype(self.dtype, device)

    def candidates(self, device: str | torch.device = "cpu") -> tuple[torch.dtype, ...]:
        """The dtypes a search tries (tune, bench): the requested one, or for ``"auto"``
        every half dtype ``device`` runs (see :func:`~halfprec.dtypes.candidate_dtypes`)."""
        return candidate_dtypes(self.dtype, device)

    def settle(
        self, device: str | torch.device = "cpu", tolerance: Tolerance | None = None
    ) -> Settled:
        """The dtypes to try on ``device`` (:meth:`candidates`) and the tolerance to judge
        them by: ``tolerance`` where the caller gives one, else the recipe's own. Every verb
        and command settles its recipe here, and nowhere else."""
        if tolerance is not None and not isinstance(tolerance, Tolerance):
            raise TypeError(
                f"tolerance must be a halfprec.Tolerance or None, got {type(tolerance).__name__}"
            )
        chosen = tolerance if tolerance is not None else self.tolerance
        return Settled(dtypes=self.candidates(device), tolerance=chosen)

    def tolerance_for(self, dtype: torch.dtype | None) -> Tolerance:
        """The tolerance with the defaults of ``dtype`` filled in."""
        return self.tolerance.resolve(dtype)

    @property
    def resolved(self) -> bool:
        """True when nothing in the recipe needs a model to mean something (no types, no
        filter_fn, a concrete dtype): such a recipe saves as JSON."""
        return (
            self.filter_fn is None
            and all(isinstance(s, str) for s in self.keep_fp32)
            and not is_auto(self.dtype)
        )

    def replace(self, **changes: Any) -> Recipe:
        """A copy with ``changes`` (``dataclasses.replace``), checked again."""
        return dataclasses.replace(self, **changes)

    # -- JSON -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The recipe as JSON values; :meth:`from_json` gives back an equal recipe."""
        if self.filter_fn is not None or not all(isinstance(s, str) for s in self.keep_fp32):
            raise RecipeError(
                "this recipe selects modules by type or filter_fn, which JSON cannot hold; "
                "save the resolved recipe of a converted model instead: "
                "halfprec.convert.recipe_of(halfprec.convert(model, recipe))"
            )
        dtype = self.dtype if isinstance(self.dtype, str) else dtype_name(self.dtype)
        out: dict[str, Any] = {"format": FORMAT, "dtype": dtype}
        out["keep_fp32"] = list(self.keep_fp32)
        out["op_islands"] = [o.to_json() for o in self.op_islands]
        out["fp32_outputs"] = list(self.fp32_outputs)
        out["fp32_ops"] = list(self.fp32_ops)
        out.update({flag: getattr(self, flag) for flag in _FLAGS})
        out["fp32_params_up_to"] = self.fp32_params_up_to
        out["tolerance"] = self.tolerance.to_json()
        out["info"] = dict(self.info)
        return out

    def dumps(self) -> str:
        """:meth:`to_json` as compact JSON text (checkpoint metadata)."""
        return json.dumps(self.to_json(), sort_keys=True, allow_nan=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Any) -> Recipe:
        """A recipe from :meth:`to_json`'s values (or an older ``halfprec tune`` policy);
        raises :class:`RecipeError` naming what is wrong."""
        if not isinstance(data, dict):
            raise RecipeError(f"a recipe is a JSON object, got {type(data).__name__}")
        fmt = data.get("format")
        if fmt not in (FORMAT, _OLD_POLICY):
            raise RecipeError(
                f'not a halfprec recipe (expected "format": "{FORMAT}", got {fmt!r}); '
                "write one with `halfprec tune -o recipe.json`"
            )
        known = {"format", "dtype", "keep_fp32", "op_islands", "fp32_ops", "tolerance", "info"}
        known |= {"fp32_params_up_to", "fp32_outputs"}
        known |= set(_FLAGS)
        unknown = sorted(set(data) - known)
        if unknown:
            raise RecipeError(f"recipe has unknown keys {unknown}; it was not written by halfprec")
        try:
            keep = data.get("keep_fp32", [])
            if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
                raise ValueError("keep_fp32 must be a list of module names")
            ops = data.get("op_islands", [])
            if not isinstance(ops, list):
                raise ValueError("op_islands must be a list")
            outs = data.get("fp32_outputs", [])  # recipes saved before it narrow every one
            if not isinstance(outs, list) or not all(isinstance(k, str) for k in outs):
                raise ValueError("fp32_outputs must be a list of module names")
            info = data.get("info", {})
            if not isinstance(info, dict):
                raise ValueError("info must be an object")
            flags: dict[str, Any] = {flag: data[flag] for flag in _FLAGS if flag in data}
            if "fp32_ops" in data:
                if not isinstance(data["fp32_ops"], list):
                    raise ValueError("fp32_ops must be a list of torch op names")
                flags["fp32_ops"] = tuple(data["fp32_ops"])
            elif fmt == _OLD_POLICY:
                flags["fp32_ops"] = ()  # what an old policy was tuned without
            if fmt == _OLD_POLICY:
                flags.setdefault("fp32_inputs", False)
            # recipes written before the field made every floating parameter half
            flags["fp32_params_up_to"] = data.get("fp32_params_up_to", 0)
            tolerance = Tolerance.from_json(data.get("tolerance", {}))
            return cls(
                dtype=data["dtype"],
                keep_fp32=tuple(keep),
                op_islands=tuple(OpRef.from_json(o) for o in ops),
                fp32_outputs=tuple(outs),
                tolerance=tolerance,
                info=info,
                **flags,
            )
        except KeyError as exc:
            raise RecipeError(f"recipe is missing {exc}") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, RecipeError):
                raise
            raise RecipeError(f"recipe is malformed: {exc}") from None

    @classmethod
    def loads(cls, text: str) -> Recipe:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # too deep, too big
            raise RecipeError(
                f"recipe is not valid JSON ({clip(str(exc))}); write it again with "
                "`halfprec tune -o`"
            ) from None
        return cls.from_json(data)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the recipe as JSON (atomically) and return the path."""
        write_text_atomic(path, json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n")
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Recipe:
        """The recipe in the JSON file ``path`` (UTF-8, a leading byte-order mark allowed;
        a regular file of at most 16 MiB, read without blocking on a FIFO)."""
        p = Path(path)
        if p.is_dir():
            raise RecipeError(
                f"recipe file {p} is a folder; give the JSON file `halfprec tune -o` wrote"
            )
        problem = refusal("recipe file", p, "create one with `halfprec tune -o`")
        if problem is not None:
            raise RecipeError(problem)
        try:
            return cls.loads(read_text_regular(p, limit=_FILE_LIMIT))
        except UnicodeDecodeError:
            raise RecipeError(
                f"recipe file {p} is not UTF-8 text; give the JSON file `halfprec tune -o` wrote"
            ) from None
        except OSError as exc:
            raise RecipeError(f"recipe file {p} cannot be read ({first_line(exc)})") from None
        except RecipeError as exc:
            raise RecipeError(f"{p}: {exc}") from None


RecipeLike = Recipe | DTypeLike | str | os.PathLike[str] | None


def _op_order(ref: OpRef) -> tuple[str, str, str, int, int, str]:
    return (*ref.site, -1 if ref.ordinal is None else ref.ordinal, ref.kind)
