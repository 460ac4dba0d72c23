"""Runtime dtype-leak audit: run a converted model under a torch function mode and report,
by the user's own source line, every place where a tensor leaves the model's half dtype.

Kinds of leak (``Leak.kind``):

- ``factory``: a floating tensor made without ``dtype`` (``torch.zeros``, ``ones``, ``full``,
  ``empty``, ``arange`` with float arguments, ``rand``/``randn``, ``tensor``, ``eye``,
  ``linspace``) whose dtype differs from the compute dtype, reported at the line that made
  it once its fp32 values (or values computed from them alone) meet a half tensor in an op
  or are returned (:mod:`halfprec.leaks.audit_trace`): a ``torch.ones`` mask that only
  becomes booleans, or is cast into the model's dtype first, is no leak (0-dim results
  never promote a half operand, so they are left out);
- ``upcast``: an op whose inputs mix half and fp32 and that promoted its result to fp32;
- ``mixed``: an op that fails on mixed half/fp32 inputs ("expected scalar type Half");
- ``explicit``: ``.float()``, ``.double()``, ``.to(torch.float32)``, ``dtype=torch.float32``
  of half values (a cast of integers or booleans, or a new fp32 tensor, moves no half value
  out of half: T5's ``relative_position.float()`` that becomes bucket indices is no leak;
  where such values meet half ones, the op that mixes them is reported as an ``upcast``);
- ``range``: a Python constant beyond the dtype's range in a fill or arithmetic (``-1e9``),
  or a cast into the half dtype that turns finite fp32 values infinite.

An upcast whose fp32 operand is a tensor the recipe itself keeps in fp32 (a small
parameter or buffer under ``Recipe.fp32_params_up_to``, as autocast keeps parameters fp32,
or a parameter of a module island: ``norm_islands``, ``keep_fp32``) is halfprec's choice,
not the code's: it is reported with ``recipe_field`` naming that setting, and does not make
the report unclean (:attr:`AuditReport.clean`).

Frames inside torch and halfprec are skipped when naming the line; ops that halfprec itself
runs (its boundary casts) are not reported. The audit *repairs as it goes* so that it reports
each leak where it starts, not at every op downstream: upcast outputs (those of a followed
factory tensor meeting half included) are cast to the compute dtype, mixed inputs are cast
before retrying, and out-of-range fill values
are clamped to the dtype's limits when the op would otherwise fail. The model's outputs under
audit are therefore not its outputs without it.
"""

from __future__ import annotations

import linecache
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, cast

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from halfprec import ops
from halfprec.batch import as_batches, call
from halfprec.compare import reference_failed
from halfprec.convert.core import (
    ConversionReport,
    Recipe,
    RecipeLike,
    conversion_report,
    convert,
)
from halfprec.dtypes import dtype_name, range_of
from halfprec.frames import is_library_file, is_torch_file
from halfprec.leaks.audit_recipe import RecipeKept, kept_by_recipe
from halfprec.leaks.audit_trace import Trace
from halfprec.modules import evaluating, finite_peak, first_line
from halfprec.tree import iter_tensors

LEAK_KINDS = ("factory", "upcast", "mixed", "explicit", "range")

_THIS_FILE = __file__
_WIDE = (torch.float32, torch.float64)


def _names(prefix: str, text: str) -> frozenset[str]:
    return frozenset(f"{prefix}.{n}" for n in text.split())


_CASTS = _names("Tensor", "float double to type type_as")
_COPIES = _names("Tensor", "copy_ __setitem__")  # values written into the first tensor


@dataclass
class Leak:
    """One leak at one source line, with how often it happened."""

    kind: str
    file: str
    line: int
    op: str
    message: str
    suggestion: str
    count: int = 1
    recipe_field: str | None = None  # set when the recipe, not the code, causes it

    @property
    def code(self) -> str:
        """The source line, stripped (empty when the file cannot be read)."""
        return linecache.getline(self.file, self.line).strip()

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "file": self.file,
            "line": self.line,
            "op": self.op,
            "count": self.count,
            "message": self.message,
            "suggestion": self.suggestion,
            "code": self.code,
            "recipe_field": self.recipe_field,
        }


@dataclass
class AuditReport:
    """What :func:`audit` found: leaks grouped by location, in the order first seen."""

    dtype: torch.dtype
    leaks: list[Leak] = field(default_factory=list)
    batches: int = 0
    ops: int = 0

    @property
    def clean(self) -> bool:
        """No leak that the code causes (those the recipe causes are only reported)."""
        return not self.problems

    @property
    def problems(self) -> list[Leak]:
        """The leaks the code causes: every leak but those with a ``recipe_field``."""
        return [leak for leak in self.leaks if leak.recipe_field is None]

    def by_location(self) -> dict[str, list[Leak]]:
        out: dict[str, list[Leak]] = {}
        for leak in self.leaks:
            out.setdefault(leak.location, []).append(leak)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": dtype_name(self.dtype),
            "batches": self.batches,
            "ops": self.ops,
            "leaks": [leak.to_json() for leak in self.leaks],
            "count": sum(leak.count for leak in self.leaks),
            "problems": len(self.problems),
        }


def _is_factory(op: str) -> bool:
    """``torch.zeros`` and the other factories of :data:`halfprec.ops.FACTORY_OPS`."""
    return op.startswith("torch.") and ops.is_factory(op)


def _op_name(func: Any) -> str:
    qual = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or func)
    owner, _, name = qual.rpartition(".")
    if owner == "_VariableFunctionsClass":
        return f"torch.{name}"
    if owner in ("TensorBase", "Tensor"):
        return f"Tensor.{name}"
    module = getattr(func, "__module__", "") or ""
    if module in ("torch.nn.functional", "torch._C._nn"):
        return f"F.{qual}"
    return f"{module}.{qual}" if module.startswith("torch") else qual


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[torch.Tensor]:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, torch.Tensor))


def _caller() -> FrameType | None:
    """The frame that called into this module (the mode's own frames skipped)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == _THIS_FILE:
        frame = frame.f_back
    return frame


def _factory_fix(op: str) -> str:
    name = op.split(".", 1)[1]
    new = (
        f"x.new_{name}(...)"
        if name in ("zeros", "ones", "full", "empty", "tensor")
        else f"{op}(..., dtype=x.dtype)"
    )
    return f"create it from a tensor in scope: {new}, or pass dtype=x.dtype, device=x.device"


def _user_line(frame: FrameType | None, direct: bool) -> tuple[str, int] | None:
    """The first frame outside torch; None when it is halfprec's own, or when ``direct``
    and the op was called from inside torch (torch's own factories are not leaks)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if is_torch_file(name):
            if direct:
                return None
            frame = frame.f_back
            continue
        if is_library_file(name):
            return None
        return name, frame.f_lineno
    return None


class _LeakMode(TorchFunctionMode):
    """The torch function mode that watches every op and repairs leaks as it goes."""

    def __init__(self, dtype: torch.dtype, kept: dict[int, RecipeKept] | None = None) -> None:
        super().__init__()
        self.dtype = dtype
        self.kept = kept or {}
        self.limit = range_of(dtype).max
        self.ops = 0
        self.leaks: dict[tuple[str, int, str, str], Leak] = {}
        self.trace = Trace()
        self.derived: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> RecipeKept

    # -- recording -----------------------------------------------------------------------
    def _record(
        self, kind: str, op: str, message: str, suggestion: str, field: str | None = None
    ) -> None:
        where = _user_line(_caller(), direct=kind == "factory")
        if where is not None:
            self._record_at(where, kind, op, message, suggestion, field)

    def _record_at(
        self,
        where: tuple[str, int],
        kind: str,
        op: str,
        message: str,
        suggestion: str,
        field: str | None = None,
    ) -> None:
        key = (*where, kind, op)
        if key in self.leaks:
            self.leaks[key].count += 1
        else:
            self.leaks[key] = Leak(
                kind, where[0], where[1], op, message, suggestion, recipe_field=field
            )

    def _wide_scalars(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[float]:
        return [
            float(a)
            for a in (*args, *kwargs.values())
            if isinstance(a, (int, float))
            and not isinstance(a, bool)
            and math.isfinite(a)
            and abs(a) > self.limit
        ]

    # -- the mode ------------------------------------------------------------------------
    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        self.ops += 1
        op = _op_name(func)
        half = self.dtype
        if ops.is_fill(op) or ops.bare(op) in ops.SCALAR_OPS:
            wide = self._wide_scalars(args, kwargs)
            if wide and (_is_factory(op) or any(t.dtype == half for t in _tensors(args, kwargs))):
                self._record(
                    "range",
                    op,
                    f"{wide[0]:g} is beyond {dtype_name(half)}'s range (max {self.limit:g})",
                    "use torch.finfo(x.dtype).min (or .max) of the tensor it fills",
                )
        try:
            out = func(*args, **kwargs)
        except RuntimeError as exc:
            out = self._retry(func, op, args, kwargs, exc)
        if half in _WIDE:
            return out
        if self.trace.any_marked(_tensors(args, kwargs)):
            return self._follow(op, args, kwargs, out)
        if not isinstance(out, torch.Tensor):
            return out
        if out.dtype == half and op in _CASTS:
            self._check_downcast(op, args, kwargs, out)
            return out
        if out.dtype not in _WIDE:
            return out
        return self._inspect(op, args, kwargs, out)

    def _check_downcast(
        self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor
    ) -> None:
        """A cast into the half dtype that turns finite values infinite: values made wide
        (an integer mask cast to fp32 and scaled by -1e9) overflow where they come back."""
        source = next(_tensors(args, kwargs), None)
        if source is None or source.dtype not in _WIDE or not out.is_floating_point():
            return
        if bool(torch.isinf(out).any()) and not bool(torch.isinf(source).any()):
            peak = finite_peak(source)
            self._record(
                "range",
                op,
                f"{op} casts {dtype_name(source.dtype)} values up to {peak:g} into "
                f"{dtype_name(self.dtype)} (max {self.limit:g}): they become inf",
                "build the value in the model's dtype with torch.finfo(x.dtype).min (or .max)",
            )

    def _inspect(
        self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor
    ) -> torch.Tensor:
        half = self.dtype
        wide = dtype_name(out.dtype)
        if _is_factory(op) and kwargs.get("dtype") is None:
            if out.dim() == 0:
                return out
            where = _user_line(_caller(), direct=True)
            if where is None:  # torch's or halfprec's own factory
                return out.to(half)
            self.trace.mark(out, where, op)  # a leak only where it meets half: followed
            return out
        inputs = list(_tensors(args, kwargs))
        source = inputs[0] if inputs else None
        if op in _CASTS or kwargs.get("dtype") in _WIDE:
            if source is not None and source.dtype == out.dtype and op in _CASTS:
                return out  # a no-op cast (inside an fp32 island)
            if source is None or not source.is_floating_point():
                # values that never were half (integer positions, a mask, a new tensor):
                # no leak here; where they meet half values, the upcast is reported
                return out
            was = dtype_name(source.dtype) if source is not None else "a new tensor"
            self._record(
                "explicit",
                op,
                f"{op} casts {was} to {wide} explicitly",
                "use .to(x.dtype) / dtype=x.dtype, or keep it if fp32 is needed for accuracy",
            )
            return out
        if any(t.dtype == half for t in inputs) and any(t.dtype in _WIDE for t in inputs):
            rest = self._blame(op, [t for t in inputs if t.dtype in _WIDE])
            if not rest:
                return out.to(half)
            by_recipe = self._kept_by_recipe(rest)
            if by_recipe is not None:
                self._record(
                    "upcast",
                    op,
                    f"{op} mixed {dtype_name(half)} and {wide} inputs and promoted to {wide}: "
                    f"the {wide} one is {by_recipe.what}, which the recipe keeps in fp32 "
                    f"(Recipe.{by_recipe.field})",
                    f"nothing to change in the code; {by_recipe.how}",
                    by_recipe.field,
                )
                return out.to(half)
            self._record(
                "upcast",
                op,
                f"{op} mixed {dtype_name(half)} and {wide} inputs and promoted to {wide}",
                f"make the {wide} operand with the model's dtype (dtype=x.dtype, x.new_*), or "
                "cast it with .to(x.dtype)",
            )
            return out.to(half)
        self._derive(inputs, out)
        return out

    def _follow(self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
        """An op on a followed factory tensor: where it meets a half tensor, the factory is
        reported; otherwise (a cast, a copy into half, an op on wide tensors alone) the mark
        goes on to the op's wide floating outputs."""
        half = self.dtype
        inputs = list(_tensors(args, kwargs))
        into_half = op in _COPIES and isinstance(args[0], torch.Tensor) and args[0].dtype == half
        if op in _CASTS or into_half or all(t.dtype != half for t in inputs):
            self.trace.carry(inputs, out)
            if isinstance(out, torch.Tensor) and out.dtype == half and op in _CASTS:
                self._check_downcast(op, args, kwargs, out)
            return out
        if isinstance(out, torch.Tensor) and out.dtype in _WIDE:
            return self._inspect(op, args, kwargs, out)
        # a half result (an in-place op on half, a comparison): 0-dim fp32 never promotes
        self._blame(op, [t for t in inputs if t.dtype in _WIDE and t.dim() > 0])
        return out

    def _blame(self, op: str, wide: list[torch.Tensor], returned: bool = False) -> list[Any]:
        """Report the factory of each followed tensor in ``wide`` (once per tensor made) at
        the line that made it; return the tensors of ``wide`` that are not followed."""
        half = dtype_name(self.dtype)
        if returned:
            how = "and the model returns it"
        else:
            met = _user_line(_caller(), direct=False)
            at = f" at {met[0]}:{met[1]}" if met is not None else ""
            how = f"and {op} mixes it with {half} values{at}"
        for origin in self.trace.first_reports(wide):
            self._record_at(
                (origin.file, origin.line),
                "factory",
                origin.op,
                f"{origin.op} made {dtype_name(origin.dtype)} without dtype in a {half} model, "
                + how,
                _factory_fix(origin.op),
            )
        return [t for t in wide if self.trace.origin(t) is None]

    def returned(self, output: Any) -> None:
        """Report the factory tensors that the model returns in fp32."""
        self._blame("", [t for _, t in iter_tensors(output)], returned=True)

    def _derive(self, inputs: list[torch.Tensor], out: torch.Tensor) -> None:
        """An fp32 result computed from tensors the recipe keeps fp32 alone (``logit_scale.
        exp()``, ``r_w_bias * scale``) is kept by the recipe too."""
        wide = [t for t in inputs if t.is_floating_point()]
        if wide and all(t.dtype in _WIDE for t in wide):
            kept = self._kept_by_recipe(wide)
            if kept is not None:
                self.derived[out] = kept.computed()

    def _kept_by_recipe(self, wide: list[torch.Tensor]) -> RecipeKept | None:
        """The recipe's reason when every fp32 operand is (a view of) a tensor the recipe
        keeps in fp32."""
        reasons = [
            self.kept.get(t.untyped_storage().data_ptr()) or self.derived.get(t) for t in wide
        ]
        if not reasons or any(r is None for r in reasons):
            return None
        return reasons[0]

    def _retry(
        self,
        func: Any,
        op: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        exc: RuntimeError,
    ) -> Any:
        half = self.dtype
        inputs = list(_tensors(args, kwargs))
        mixed = any(t.dtype == half for t in inputs) and any(t.dtype in _WIDE for t in inputs)
        wide = self._wide_scalars(args, kwargs)
        if not mixed and not wide:
            raise exc

        def fix(a: Any) -> Any:
            if isinstance(a, torch.Tensor) and a.dtype in _WIDE and mixed:
                return a.to(half)
            if isinstance(a, (list, tuple)) and mixed:
                return type(a)(fix(x) for x in a)
            if isinstance(a, (int, float)) and not isinstance(a, bool) and a in wide:
                return math.copysign(self.limit, a)
            return a

        out = func(*(fix(a) for a in args), **{k: fix(v) for k, v in kwargs.items()})
        rest = self._blame(op, [t for t in inputs if t.dtype in _WIDE]) if mixed else []
        by_recipe = self._kept_by_recipe(rest) if rest else None
        if by_recipe is not None:
            self._record(
                "mixed",
                op,
                f"{op} fails on {dtype_name(half)} and fp32 inputs without halfprec's guards: "
                f"the fp32 one is {by_recipe.what}, which the recipe keeps in fp32 "
                f"(Recipe.{by_recipe.field})",
                f"nothing to change in the code; {by_recipe.how}",
                by_recipe.field,
            )
        elif rest:
            self._record(
                "mixed",
                op,
                f"{op} fails on {dtype_name(half)} and fp32 inputs without halfprec's guards "
                f"({first_line(exc)})",
                "make the fp32 input with the model's dtype (dtype=x.dtype, x.new_*), or cast "
                "it with .to(x.dtype)",
            )
        return out


def audit(model: nn.Module, inputs: Any, recipe: RecipeLike = None) -> AuditReport:
    """Run ``model`` in half on ``inputs`` and report every dtype leak by source line.

    ``model``: an fp32 model (converted here by ``recipe``, a :class:`Recipe` or a
    dtype, default ``"auto"``, with ``guard_boundaries=False``, ``saturate_fills=False``
    and no op policy, so that leaks are not hidden by halfprec's own guards) or one
    already converted by :func:`convert` (audited as it is; ``recipe`` is then ignored).
    ``inputs``: one batch or a list of batches.
    """
    fp32: nn.Module | None = None
    report = conversion_report(model)
    if report is None:
        fp32 = model
        unguarded = Recipe.of(recipe).replace(
            guard_boundaries=False, saturate_fills=False, fp32_ops=(), fp32_inputs=False
        )
        model = convert(model, unguarded)
        report = cast(ConversionReport, conversion_report(model))
    mode = _LeakMode(report.dtype, kept_by_recipe(model, report))
    batches = as_batches(inputs)
    failed: tuple[int, Exception] | None = None
    with evaluating(model), torch.no_grad(), mode:
        for i, batch in enumerate(batches):
            try:
                mode.returned(call(model, batch))
            except Exception as exc:
                failed = (i, exc)
                break
    if failed is not None:
        index, error = failed
        if fp32 is not None:  # inputs the fp32 model refuses too: the inputs' fault
            with evaluating(fp32), torch.no_grad():
                try:
                    call(fp32, batches[index])
                except Exception as fp32_exc:
                    raise reference_failed(index, batches[index], fp32_exc) from fp32_exc
        raise error
    return AuditReport(report.dtype, list(mode.leaks.values()), len(batches), mode.ops)
