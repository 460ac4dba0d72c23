"""Layerwise diagnosis: which module breaks in half precision, and why.

``diagnose(model, inputs, config)`` runs the fp32 model and a half copy on the same inputs
with hooks on every module and reports, per module in execution order:

- the largest fp32 activation (``fp32_max_abs``) and how many values lie beyond the
  dtype's range (fp16 max 65504);
- the **local** error: the module run in half on its own fp32 inputs, with every module it
  calls replaced by that callee's recorded fp32 result (cast to half). This isolates the
  error that the module's *own* code adds, so a hand-written softmax inside an attention
  block is charged to the attention block and not to the Linear that reads its output;
- the **accumulated** error: the module's output inside the full half run;
- flags: inf/NaN, results flushed to zero, exceptions raised in half, and dtype leaks
  (fp32 tensors reaching half modules, a half module returning fp32).

It names the first module where the half run diverges and the *culprit*: the module whose
own half computation breaks (the divergence itself, an enclosing module, or the closest
earlier module that broke). Each module's own code runs once in half for the local errors,
so a diagnosis costs about one fp32 and two half forward passes per batch, whatever the
depth of the model. Shared modules and loops are handled per call; nested and dict inputs
follow :mod:`halfprec.batch`.
"""

from __future__ import annotations

import contextlib
import copy
import time
import weakref
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.batch import as_batches, call
from halfprec.compare import Comparison, Tolerance, compare_outputs
from halfprec.convert.core import ConfigLike, ConvertConfig, conversion_report
from halfprec.convert.op_islands import OpRef
from halfprec.dtypes import dtype_name, range_of
from halfprec.errors import HalfprecError
from halfprec.errorstats import ErrorStats, relative_threshold
from halfprec.modules import finite_peak, first_line, in_island, model_device
from halfprec.opprobe import OpDiagnosis, OpProbe
from halfprec.tree import iter_tensors, map_tensors

__all__ = ["ModuleDiagnosis", "Divergence", "Diagnosis", "diagnose", "naive_half"]


@dataclass
class ModuleDiagnosis:
    """One module (all its calls, all batches), half against fp32."""

    index: int
    name: str
    type: str
    params: int
    calls: int = 0
    input_max_abs: float = 0.0
    local: ErrorStats = field(default_factory=ErrorStats)
    accumulated: ErrorStats = field(default_factory=ErrorStats)
    reached: bool = False
    local_exception: str | None = None
    half_exception: str | None = None
    leak: str | None = None
    handed: ErrorStats = field(default_factory=ErrorStats)  # inputs it hands its callees

    @property
    def display_name(self) -> str:
        return self.name or "(model)"

    @property
    def fp32_max_abs(self) -> float:
        return self.local.ref_peak

    @property
    def local_error(self) -> float:
        return self.local.rel_error

    @property
    def accumulated_error(self) -> float | None:
        """None when the half run raised before reaching this module."""
        return self.accumulated.rel_error if self.reached else None

    @property
    def flags(self) -> list[str]:
        out = []
        if self.local_exception or self.half_exception:
            out.append("raises")
        if self.local.nonfinite or self.accumulated.nonfinite:
            out.append("inf/nan")
        if self.local.beyond_range:
            out.append("beyond-range")
        if self.local.flushed:
            out.append("underflow")
        if self.leak:
            out.append("dtype-leak")
        return out

    def problem(self, threshold: float, dtype: torch.dtype) -> str | None:
        """Why this module's own half computation is broken, or None."""
        return _local_problem(
            self.local, self.local_exception, self.leak, threshold, dtype
        ) or _handed_problem(self.handed, threshold, dtype)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "type": self.type,
            "params": self.params,
            "calls": self.calls,
            "fp32_max_abs": self.fp32_max_abs,
            "input_max_abs": self.input_max_abs,
            "beyond_range": self.local.beyond_range,
            "local_error": self.local_error,
            "accumulated_error": self.accumulated_error,
            "local_nonfinite": self.local.nonfinite,
            "accumulated_nonfinite": self.accumulated.nonfinite,
            "flushed": self.local.flushed,
            "local_exception": self.local_exception,
            "half_exception": self.half_exception,
            "dtype_leak": self.leak,
            "flags": self.flags,
        }


@dataclass(frozen=True)
class Divergence:
    """Where the half run first goes wrong, and the module to blame."""

    module: str
    type: str
    call: int
    batch: int
    reason: str
    culprit: str
    culprit_type: str
    culprit_reason: str
    culprit_op: str | None = None  # the worst op of the culprit's own code, when one breaks

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Diagnosis:
    """The result of :func:`diagnose`. Render with :mod:`halfprec.report_diagnose`."""

    dtype: torch.dtype
    threshold: float
    modules: list[ModuleDiagnosis]
    divergence: Divergence | None
    output: Comparison
    batches: int
    seconds: float
    half_model: str
    ops: list[OpDiagnosis] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.output.passed

    @property
    def culprit(self) -> str | None:
        return self.divergence.culprit if self.divergence is not None else None

    def __getitem__(self, name: str) -> ModuleDiagnosis:
        for m in self.modules:
            if m.name == name:
                return m
        raise KeyError(f"no module {name!r} was called; see Diagnosis.modules")

    def problems(self) -> list[ModuleDiagnosis]:
        """Modules whose own half computation is broken, in execution order."""
        return [m for m in self.modules if m.problem(self.threshold, self.dtype) is not None]

    def problem_ops(self, module: str | None = None) -> list[OpDiagnosis]:
        """Ops whose own half computation breaks (of ``module`` only, if given), worst first."""
        found = [
            o
            for o in self.ops
            if (module is None or o.ref.module == module)
            and o.problem(self.threshold, self.dtype) is not None
        ]
        return sorted(found, key=lambda o: o.severity(), reverse=True)

    def worst(self, n: int = 15) -> list[ModuleDiagnosis]:
        """The ``n`` worst offenders: raising, then inf/NaN, then by local error."""

        def key(m: ModuleDiagnosis) -> tuple[int, int, float]:
            raises = bool(m.local_exception or m.half_exception or m.leak)
            return (-int(raises), -int(m.local.nonfinite > 0), -m.local_error)

        return sorted(self.modules, key=key)[:n]

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": dtype_name(self.dtype),
            "half_model": self.half_model,
            "threshold": self.threshold,
            "batches": self.batches,
            "seconds": self.seconds,
            "passed": self.passed,
            "divergence": self.divergence.to_json() if self.divergence else None,
            "output": self.output.to_json(),
            "modules": [m.to_json() for m in self.modules],
            "ops": [o.to_json() for o in self.ops],
        }


def _local_problem(
    stats: ErrorStats, exc: str | None, leak: str | None, threshold: float, dtype: torch.dtype
) -> str | None:
    name = dtype_name(dtype)
    if exc:
        return f"raises in {name}: {exc}"
    if stats.nonfinite:
        if stats.beyond_range:
            return (
                f"overflows: fp32 values reach {stats.ref_peak:.3g}, beyond the {name} max "
                f"{range_of(dtype).max:g}"
            )
        return f"makes inf/NaN in {name} (an intermediate value overflows or divides by 0)"
    if stats.rel_error > threshold:
        under = f"; {stats.flushed} results flushed to 0" if stats.flushed else ""
        return f"relative error {stats.rel_error:.3g} > {threshold:.3g}{under}"
    if leak:
        return f"dtype leak: {leak}"
    return None


def naive_half(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``model.to(dtype)`` on a copy, floating inputs cast at the root: the naive conversion."""
    twin = copy.deepcopy(model).to(dtype)
    cast = _cast_to(dtype)

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        return map_tensors(cast, args), map_tensors(cast, kwargs)

    twin.register_forward_pre_hook(hook, with_kwargs=True)
    return twin


def _cast_to(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t

    return cast


class _Snapshots:
    """Copies of the tensors seen in one fp32 pass, one copy per tensor and version: a
    module's output that the next module takes as input is copied once, not twice."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[weakref.ref[torch.Tensor], int, torch.Tensor]] = {}

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        try:
            version = t._version
        except RuntimeError:  # inference tensors have no version counter: always copy
            return t.detach().clone()
        entry = self.seen.get(id(t))
        if entry is not None and entry[0]() is t and entry[1] == version:
            return entry[2]
        copy_ = t.detach().clone()
        self.seen[id(t)] = (weakref.ref(t), version, copy_)
        return copy_


def _peak(obj: Any) -> float:
    peak = 0.0
    for _, t in iter_tensors(obj):
        if t.is_floating_point():
            peak = max(peak, finite_peak(t))
    return peak


def _float_dtypes(obj: Any) -> set[torch.dtype]:
    return {t.dtype for _, t in iter_tensors(obj) if t.is_floating_point()}


class _Call:
    """One call of one module in the fp32 run of one batch."""

    __slots__ = ("name", "nth", "end", "parent", "callees", "inputs", "output", "problem")

    def __init__(self, name: str, nth: int, parent: _Call | None) -> None:
        self.name, self.nth, self.parent = name, nth, parent
        self.end = -1
        self.callees: list[_Call] = []
        self.inputs: Any = None
        self.output: Any = None
        self.problem: str | None = None


class _Diagnoser:
    def __init__(
        self, model: nn.Module, half: nn.Module, dtype: torch.dtype, threshold: float
    ) -> None:
        self.model, self.half, self.dtype, self.threshold = model, half, dtype, threshold
        self.original = next(
            (p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32
        )
        self.limits = range_of(dtype)
        self.names = {id(m): n for n, m in model.named_modules()}
        self.twins = dict(half.named_modules())
        self.twin_names = {id(m): n for n, m in self.twins.items()}
        missing = [n for n in self.names.values() if n not in self.twins]
        if missing:
            raise HalfprecError(
                f"the half model has no module {missing[0]!r}; pass half=convert(model, ...) "
                "or leave half=None"
            )
        report = conversion_report(half)
        self.islands = tuple(report.islands) if report is not None else ()
        self.modules: dict[str, ModuleDiagnosis] = {}
        self.ops: dict[OpRef, OpDiagnosis] = {}
        self.probed: set[str] = set()
        self.params = {n: sum(p.numel() for p in m.parameters()) for n, m in model.named_modules()}

    def in_island(self, name: str) -> bool:
        return in_island(name, self.islands)

    def record(self, name: str) -> ModuleDiagnosis:
        rec = self.modules.get(name)
        if rec is None:
            module = self.twins[name]
            rec = ModuleDiagnosis(len(self.modules), name, type(module).__name__, self.params[name])
            self.modules[name] = rec
        return rec

    # -- fp32 pass with local evaluations ---------------------------------------------------
    def fp32_pass(self, batch: Any) -> tuple[list[_Call], Any]:
        calls: list[_Call] = []
        stack: list[_Call] = []
        counters: dict[str, int] = defaultdict(int)
        clock = [0]
        snap = _Snapshots()

        def pre(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            name = self.names[id(mod)]
            c = _Call(name, counters[name], stack[-1] if stack else None)
            counters[name] += 1
            if c.parent is not None:
                c.parent.callees.append(c)
            calls.append(c)
            stack.append(c)
            rec = self.record(name)
            c.inputs = map_tensors(snap, (args, kwargs))
            rec.input_max_abs = max(rec.input_max_abs, _peak(c.inputs))

        def post(mod: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            c = stack.pop()
            c.end = clock[0]
            clock[0] += 1
            c.output = map_tensors(snap, output)
            self.local(c)
            for callee in c.callees:  # kept until now to judge what the caller hands them
                callee.inputs = None
            if c.parent is None:
                c.inputs = None

        with _hooked(self.model, pre, post):
            out = call(self.model, batch)
        return calls, out

    def local(self, c: _Call) -> None:
        rec = self.record(c.name)
        rec.calls += 1
        inside = self.in_island(c.name)
        leaks: list[str] = []
        stats = ErrorStats()
        handed = ErrorStats()
        exc_text = None
        try:
            args, kwargs, out = self.run_own_code(c, leaks, handed)
        except Exception as exc:  # any failure in half is a finding, not a crash
            exc_text = first_line(exc)
            stats.ref_peak = _peak(c.output)
        else:
            stats.add(c.output, out, self.limits)
            if (
                not inside
                and c.name
                and self.dtype in _float_dtypes((args, kwargs))
                and self.original in _float_dtypes(out)
            ):
                leaks.append(f"returns {dtype_name(self.original)} from {dtype_name(self.dtype)}")
        rec.local.merge(stats)
        rec.handed.merge(handed)
        if exc_text and rec.local_exception is None:
            rec.local_exception = exc_text
        if leaks and rec.leak is None:
            rec.leak = leaks[0]
        c.problem = _local_problem(
            stats, exc_text, leaks[0] if leaks else None, self.threshold, self.dtype
        ) or _handed_problem(handed, self.threshold, self.dtype)
        if c.problem is not None and not inside and c.name not in self.probed:
            self.probed.add(c.name)
            probe = OpProbe(self.twins[c.name], c.name, self.dtype, self.ops)
            with contextlib.suppress(Exception), probe:
                self.run_own_code(c, [], ErrorStats())

    def run_own_code(self, c: _Call, leaks: list[str], handed: ErrorStats) -> tuple[Any, Any, Any]:
        """The module of call ``c`` in half on its fp32 inputs, callees standing in."""
        twin = self.twins[c.name]
        inside = self.in_island(c.name)
        # copies: the recorded tensors are shared between calls and must not change
        args, kwargs = map_tensors(_copy_to(self.original if inside else self.dtype), c.inputs)
        queues: dict[str, deque[_Call]] = defaultdict(deque)
        for callee in c.callees:
            queues[callee.name].append(callee)
        patched = []
        for name, queue in queues.items():
            m = self.twins[name]
            if m is twin or "forward" in m.__dict__:
                continue
            m.forward = self.stand_in(name, queue, m.forward, leaks, handed)
            patched.append(m)
        try:
            return args, kwargs, twin(*args, **kwargs)
        finally:
            for m in patched:
                del m.forward

    def stand_in(
        self,
        name: str,
        queue: deque[_Call],
        original: Callable[..., Any],
        leaks: list[str],
        handed: ErrorStats,
    ) -> Callable[..., Any]:
        """A forward for callee ``name`` that returns its recorded fp32 results, in order."""
        callee_inside = self.in_island(name)
        out_cast = _copy_to(self.original if callee_inside else self.dtype)
        fp32 = self.original

        def forward(*args: Any, **kwargs: Any) -> Any:
            if not queue:  # called more often than in fp32: control flow changed
                return original(*args, **kwargs)
            if queue[0].inputs is not None:
                handed.add(queue[0].inputs, (args, kwargs), self.limits)
            if not callee_inside and fp32 in _float_dtypes((args, kwargs)):
                leaks.append(f"passes {dtype_name(fp32)} tensors to half module {name!r}")
            if callee_inside:
                # an island hands its caller back the caller's dtype, whether by hooks or by a
                # mixed-dtype kernel (half in, fp32 parameters, half out)
                given = _float_dtypes((args, kwargs))
                cast = _copy_to(next(iter(given))) if len(given) == 1 else out_cast
                return map_tensors(cast, queue.popleft().output)
            return map_tensors(out_cast, queue.popleft().output)

        return forward

    # -- half pass ---------------------------------------------------------------------------
    def half_pass(
        self, batch: Any, by_key: dict[tuple[str, int], _Call]
    ) -> tuple[Any, list[tuple[tuple[str, int], ErrorStats]], tuple[tuple[str, int], str] | None]:
        events: list[tuple[tuple[str, int], ErrorStats]] = []
        stack: list[tuple[str, int]] = []
        counters: dict[str, int] = defaultdict(int)

        def pre(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            name = self.twin_names[id(mod)]
            stack.append((name, counters[name]))
            counters[name] += 1

        def post(mod: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            key = stack.pop()
            ref = by_key.get(key)
            stats = ErrorStats()
            if ref is not None:
                stats.add(ref.output, output, self.limits)
            rec = self.modules.get(key[0])
            if rec is not None:
                rec.accumulated.merge(stats)
                rec.reached = True
            events.append((key, stats))

        raised = None
        out = None
        with _hooked(self.half, pre, post):
            try:
                out = call(self.half, batch)
            except Exception as exc:  # the half run failing is what we diagnose
                key = stack[-1] if stack else ("", 0)
                raised = (key, first_line(exc))
                rec = self.modules.get(key[0])
                if rec is not None and rec.half_exception is None:
                    rec.half_exception = raised[1]
        return out, events, raised

    # -- divergence ----------------------------------------------------------------------------
    def divergence(
        self,
        batch_index: int,
        calls: list[_Call],
        events: list[tuple[tuple[str, int], ErrorStats]],
        raised: tuple[tuple[str, int], str] | None,
    ) -> Divergence | None:
        by_key = {(c.name, c.nth): c for c in calls}
        first: tuple[tuple[str, int], str] | None = None
        for key, stats in events:
            why = _acc_problem(stats, self.threshold, self.dtype)
            if why is not None:
                first = (key, why)
                break
        if first is None and raised is not None:
            first = (raised[0], f"raises in {dtype_name(self.dtype)}: {raised[1]}")
        if first is None:
            return None
        (name, nth), why = first
        d = by_key.get((name, nth))
        culprit = self.blame(d, calls) if d is not None else None
        if culprit is None:
            c_name, c_why = name, "rounding accumulates; no single module breaks on its own"
        else:
            c_name, c_why = culprit.name, culprit.problem or ""
        worst = sorted(
            (o for o in self.ops.values() if o.ref.module == c_name),
            key=lambda o: o.severity(),
            reverse=True,
        )
        bad = [o for o in worst if o.problem(self.threshold, self.dtype) is not None]
        return Divergence(
            culprit_op=(
                f"{bad[0].ref.op} at {bad[0].ref.location} (occurrence {bad[0].ref.occurrence}):"
                f" {bad[0].problem(self.threshold, self.dtype)}"
                if bad
                else None
            ),
            module=name,
            type=self.modules[name].type if name in self.modules else "",
            call=nth,
            batch=batch_index,
            reason=why,
            culprit=c_name,
            culprit_type=self.modules[c_name].type if c_name in self.modules else "",
            culprit_reason=c_why,
        )

    @staticmethod
    def blame(d: _Call, calls: list[_Call]) -> _Call | None:
        if d.problem is not None:
            return d
        a = d.parent
        while a is not None:
            if a.problem is not None:
                return a
            a = a.parent
        earlier = [c for c in calls if c.problem is not None and c.end < d.end]
        return max(earlier, key=lambda c: c.end) if earlier else None


def _handed_problem(stats: ErrorStats, threshold: float, dtype: torch.dtype) -> str | None:
    """A module whose own code hands its callees broken inputs (then fixed by stand-ins)."""
    if stats.nonfinite or stats.rel_error > threshold:
        why = _local_problem(stats, None, None, threshold, dtype)
        return f"hands its callees broken inputs: {why}"
    return None


def _acc_problem(stats: ErrorStats, threshold: float, dtype: torch.dtype) -> str | None:
    if stats.nonfinite:
        return f"{stats.nonfinite} inf/NaN values in the {dtype_name(dtype)} run"
    if stats.rel_error > threshold:
        return f"accumulated relative error {stats.rel_error:.3g} > {threshold:.3g}"
    return None


def _copy_to(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype, copy=True) if t.is_floating_point() else t.clone()

    return cast


class _hooked:
    """Context manager: hooks on every module of ``model``, removed on exit."""

    def __init__(self, model: nn.Module, pre: Callable[..., Any], post: Callable[..., Any]):
        self.model, self.pre, self.post = model, pre, post
        self.handles: list[Any] = []

    def __enter__(self) -> None:
        for _, m in self.model.named_modules():
            self.handles.append(m.register_forward_pre_hook(self.pre, with_kwargs=True))
            self.handles.append(m.register_forward_hook(self.post, with_kwargs=True))

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()


def _model_dtype_for(model: nn.Module, half: nn.Module | None, config: ConfigLike) -> Any:
    if half is not None and config is None:
        report = conversion_report(half)
        if report is not None:
            return report.dtype
        found = next((p.dtype for p in half.parameters() if p.is_floating_point()), None)
        if found is not None:
            return found
    device = model_device(model)
    return ConvertConfig.of(config).resolve(device).dtype


def diagnose(
    model: nn.Module,
    inputs: Any,
    config: ConfigLike = None,
    *,
    half: nn.Module | None = None,
    tolerance: Tolerance | None = None,
) -> Diagnosis:
    """Diagnose ``model`` in half precision on ``inputs`` (one batch, or a list of batches).

    ``config``: a :class:`ConvertConfig` or a dtype; only its dtype is used here
    (``"auto"`` by default; taken from ``half`` when ``half`` is given and ``config`` is not).
    ``half``: the half model to examine, with the same module names (e.g.
    ``convert(model, config)`` to diagnose halfprec's conversion); default: a naive
    ``model.to(dtype)`` copy, which is what breaks for most users. ``tolerance`` judges the outputs
    and sets the divergence threshold (relative error ``10**(-min_sqnr_db/20)``).
    ``model`` is not changed; its train/eval mode is used as is.
    """
    start = time.perf_counter()
    batches = as_batches(inputs)
    dt = _model_dtype_for(model, half, config)
    tol = tolerance if tolerance is not None else Tolerance.for_dtype(dt)
    threshold = relative_threshold(tol.min_sqnr_db)
    half_model = half if half is not None else naive_half(model, dt)
    label = "converted" if conversion_report(half_model) is not None else "naive"
    if half is not None and label == "naive":
        label = "given"
    d = _Diagnoser(model, half_model, dt, threshold)
    divergence = None
    ref_outs: list[Any] = []
    half_outs: list[Any] = []
    problems: list[str] = []
    with torch.no_grad():  # not inference_mode: snapshots read tensors' version counters
        for i, batch in enumerate(batches):
            calls, ref_out = d.fp32_pass(batch)
            by_key = {(c.name, c.nth): c for c in calls}
            out, events, raised = d.half_pass(batch, by_key)
            if divergence is None:
                divergence = d.divergence(i, calls, events, raised)
            if raised is not None:
                problems.append(f"batch {i}: the half model raised {raised[1]}")
            else:
                ref_outs.append(ref_out)
                half_outs.append(out)
            del calls, by_key
    output = compare_outputs(ref_outs, half_outs, tolerance=tol, dtype=dt)
    output.problems.extend(problems)
    output.batches = len(batches)
    modules = sorted(d.modules.values(), key=lambda m: m.index)
    return Diagnosis(
        dtype=dt,
        threshold=threshold,
        modules=modules,
        divergence=divergence,
        output=output,
        batches=len(batches),
        seconds=time.perf_counter() - start,
        half_model=label,
        ops=list(d.ops.values()),
    )
