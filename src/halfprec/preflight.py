"""Numeric preflight: what will not fit the half dtype, found before converting.

Static checks (no forward pass):

- parameters, buffers (BatchNorm ``running_mean``/``running_var``) and plain tensor
  attributes whose values lie beyond the dtype's range (fp16 max 65504);
- ``eps`` attributes (``eps``, ``variance_epsilon``, ...) below the dtype's smallest
  subnormal, which round to 0 (BERT's ``eps=1e-12`` is 0 in fp16).

With inputs, one fp32 forward pass also finds Python constants passed to fills
(``masked_fill``, ``fill_``, ``full``, ``clamp``, ...: the ops of
:data:`halfprec.ops.FILL_OPS`) that the dtype cannot hold, such as ``-1e9`` or
``torch.finfo(torch.float32).min``: in half these raise "value cannot be converted to type
at::Half without overflow".

Each finding says whether ``convert``, run with the same recipe, keeps it safe
(``handled``) and which recipe field does (``recipe_field``): a fill that convert
saturates (``saturate_fills``, on by default), an eps or a fill inside a module kept in
fp32 (``norm_islands``, ``keep_fp32``, ``filter_fn``). Out-of-range parameters are always
kept in fp32 by convert (no field governs that). The answer is convert's own: preflight
converts a copy of the model with the recipe and reads its :class:`ConversionReport`,
only when there is an eps or fill finding to answer for.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

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
from halfprec.convert.fills import SaturatingFills
from halfprec.dtypes import dtype_name, range_of
from halfprec.frames import user_location
from halfprec.modules import finite_peak, model_device

EPS_NAMES = ("eps", "epsilon", "variance_epsilon", "layer_norm_eps", "norm_eps", "rms_norm_eps")


@dataclass(frozen=True)
class PreflightFinding:
    """One value the dtype cannot represent."""

    kind: str  # "range", "eps", "fill"
    module: str
    module_type: str
    detail: str
    value: float
    handled: bool
    location: str | None = None
    recipe_field: str | None = None  # the Recipe field that makes convert handle it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Preflight:
    """The result of :func:`preflight`; ``problems`` are the findings convert leaves open."""

    dtype: torch.dtype
    findings: list[PreflightFinding] = field(default_factory=list)
    forward_checked: bool = False

    @property
    def problems(self) -> list[PreflightFinding]:
        return [f for f in self.findings if not f.handled]

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": dtype_name(self.dtype),
            "forward_checked": self.forward_checked,
            "problems": len(self.problems),
            "findings": [f.to_json() for f in self.findings],
        }


def _static(model: nn.Module, dtype: torch.dtype) -> list[PreflightFinding]:
    limits = range_of(dtype)
    name_ = dtype_name(dtype)
    found: list[PreflightFinding] = []
    for mname, module in model.named_modules():
        mtype = type(module).__name__
        tensors: list[tuple[str, str, torch.Tensor]] = []
        tensors += [("parameter", n, p) for n, p in module.named_parameters(recurse=False)]
        tensors += [
            ("buffer", n, b) for n, b in module.named_buffers(recurse=False) if b is not None
        ]
        tensors += [
            ("attribute", k, v)
            for k, v in vars(module).items()
            if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter)
        ]
        for what, tname, t in tensors:
            if not t.is_floating_point() or t.numel() == 0:
                continue
            peak = finite_peak(t)
            if peak > limits.max:
                found.append(
                    PreflightFinding(
                        "range",
                        mname,
                        mtype,
                        f"{what} {tname} reaches {peak:.3g}, beyond the {name_} max "
                        f"{limits.max:g}; convert keeps {mname or 'the model'} in fp32",
                        peak,
                        handled=True,
                    )
                )
        for attr in EPS_NAMES:
            eps = getattr(module, attr, None) if attr in vars(module) else None
            if not isinstance(eps, float) or eps <= 0:
                continue
            if eps >= limits.smallest_subnormal:
                continue
            detail = (
                f"{attr}={eps:g} is 0 in {name_} (smallest subnormal "
                f"{limits.smallest_subnormal:.3g})"
            )
            found.append(PreflightFinding("eps", mname, mtype, detail, eps, handled=False))
    return found


class _FillWatch(TorchFunctionMode):
    """Records Python constants passed to fills that ``limit`` cannot hold."""

    def __init__(self, limit: float, stack: list[str]) -> None:
        super().__init__()
        self.limit, self.stack = limit, stack
        # (module, op, value, file:line) -> the modules running, and whether the op's result
        # takes the half dtype in a converted model (``torch.full`` without dtype does not)
        self.hits: dict[tuple[str, str, float, str | None], tuple[tuple[str, ...], bool]] = {}

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if ops.is_fill(name):
            self.inspect(name, args, kwargs)
        return func(*args, **kwargs)

    def inspect(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        target = args[0] if args and isinstance(args[0], torch.Tensor) else None
        dtype = kwargs.get("dtype")
        if dtype is None and target is not None and name not in ("full",):
            dtype = target.dtype
        if dtype is not None and not dtype.is_floating_point:
            return
        values = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
        values += [
            v for k, v in kwargs.items() if k in ("value", "fill_value") and isinstance(v, float)
        ]
        for v in values:
            if math.isfinite(v) and abs(v) > self.limit:
                module = self.stack[-1] if self.stack else ""
                key = (module, name, float(v), user_location())
                half = not (name == "full" and kwargs.get("dtype") is None)
                self.hits.setdefault(key, (tuple(self.stack), half))


def _fills(model: nn.Module, batch: Any, dtype: torch.dtype) -> list[PreflightFinding]:
    stack: list[str] = []
    names = {id(m): n for n, m in model.named_modules()}
    types = {n: type(m).__name__ for n, m in model.named_modules()}
    handles = []

    def enter(mod: nn.Module, args: Any) -> None:
        stack.append(names[id(mod)])

    def leave(mod: nn.Module, args: Any, output: Any) -> None:
        stack.pop()

    for _, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(enter))
        handles.append(m.register_forward_hook(leave, always_call=True))
    watch = _FillWatch(range_of(dtype).max, stack)
    try:
        with torch.inference_mode(), watch:
            try:
                call(model, batch)
            except Exception as exc:  # the user's fp32 forward() on these inputs
                raise reference_failed(0, batch, exc) from exc
    finally:
        for h in handles:
            h.remove()
    name_ = dtype_name(dtype)
    found: list[PreflightFinding] = []
    for (module, func, value, loc), (running, half) in watch.hits.items():
        detail = f"{func}(..., {value:g}) cannot be held by {name_} (max {range_of(dtype).max:g})"
        found.append(
            _Fill(
                "fill",
                module,
                types.get(module, ""),
                detail,
                value,
                False,
                loc,
                stack=running,
                saturable=half and func in SaturatingFills.NAMES,
            )
        )
    return found


@dataclass(frozen=True)
class _Fill(PreflightFinding):
    """A fill finding with the modules that were running (outermost first), and whether
    convert's saturating fills would reach its op (one of theirs, of the half dtype)."""

    stack: tuple[str, ...] = ()
    saturable: bool = False


_FIELDS = (("norm island", "norm_islands"), ("keep_fp32", "keep_fp32"), ("filter_fn", "filter_fn"))


def _island_field(name: str, report: ConversionReport) -> str | None:
    """The recipe field that keeps module ``name`` in fp32, or None when it goes half (an
    island kept for its range is governed by no field: ``"range"``)."""
    owners = [n for n in report.islands if n == "" or name == n or name.startswith(f"{n}.")]
    if not owners:
        return None
    reason = report.islands[owners[0]]
    return next((field for start, field in _FIELDS if reason.startswith(start)), "range")


def _answer(finding: PreflightFinding, report: ConversionReport) -> PreflightFinding:
    """``finding`` with ``handled`` and ``recipe_field`` as convert answers them."""
    field = _island_field(finding.module, report)
    where = finding.module or "the model"
    if field is not None:
        how = f"convert keeps {where} in fp32" + ("" if field == "range" else f" ({field})")
    elif (
        finding.kind == "fill"
        and isinstance(finding, _Fill)
        and finding.saturable
        and any(m in report.fill_guards for m in finding.stack)
    ):
        field, how = "saturate_fills", "convert saturates it to the dtype's limit (saturate_fills)"
    elif finding.kind == "fill":
        how = f"use torch.finfo(x.dtype).min, or keep {where} in fp32"
    else:
        how = "keep it in fp32 or raise eps"
    return PreflightFinding(
        finding.kind,
        finding.module,
        finding.module_type,
        f"{finding.detail}; {how}",
        finding.value,
        handled=field is not None,
        location=finding.location,
        recipe_field=None if field == "range" else field,
    )


def _answered(
    model: nn.Module, recipe: Recipe, findings: list[PreflightFinding]
) -> list[PreflightFinding]:
    """Eps and fill findings answered by converting a copy with ``recipe``."""
    if not any(f.kind in ("eps", "fill") for f in findings):
        return findings
    report = cast(ConversionReport, conversion_report(convert(model, recipe)))
    return [f if f.kind == "range" else _answer(f, report) for f in findings]


def preflight(model: nn.Module, inputs: Any = None, recipe: RecipeLike = None) -> Preflight:
    """Check ``model`` against ``recipe`` (a :class:`Recipe` or a dtype; default ``"auto"``)
    before conversion; with ``inputs`` (one batch or a list; the first is used), also run
    one fp32 forward pass to find fill constants. Whether convert handles each finding is
    answered for that recipe (its islands and ``saturate_fills``)."""
    device = model_device(model)
    recipe = Recipe.of(recipe)
    dt = recipe.resolve(device).dtype
    findings = _static(model, dt)
    if inputs is not None:
        findings.extend(_fills(model, as_batches(inputs)[0], dt))
    recipe = recipe.replace(dtype=dt)
    return Preflight(dt, _answered(model, recipe, findings), forward_checked=inputs is not None)
