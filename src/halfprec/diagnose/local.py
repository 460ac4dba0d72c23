"""Module attribution: each module's *local* error, the error its own code adds.

:meth:`Diagnoser.fp32_pass` runs the fp32 model with hooks on every module. When a call
ends, the module's half twin runs on that call's recorded fp32 inputs, with every module it
calls standing in with that callee's recorded fp32 result (cast to half). What differs from
the fp32 output is the module's own error; a module whose own code breaks has its ops
probed (:mod:`halfprec.diagnose.ops`).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from halfprec.batch import call
from halfprec.convert.core import conversion_report
from halfprec.convert.op_islands import OpRef
from halfprec.diagnose.ops import OpDiagnosis, OpProbe
from halfprec.diagnose.problems import handed_problem, local_problem
from halfprec.diagnose.recording import Call, Snapshots, copy_to, float_dtypes, hooked, peak_of
from halfprec.diagnose.results import ModuleDiagnosis
from halfprec.diagnose.state import fresh_state, keep_state
from halfprec.dtypes import dtype_name, range_of
from halfprec.errors import HalfprecError
from halfprec.errorstats import ErrorStats
from halfprec.modules import first_line, in_island, param_counts
from halfprec.tree import map_tensors


class Diagnoser:
    """One diagnosis in progress: the fp32 model, its half twin (same module names), the
    half dtype and error threshold, and what has been found so far (``modules``, ``ops``).
    The half pass and the divergence are in :mod:`halfprec.diagnose.divergence`."""

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
        self.params = param_counts(model)

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
    def fp32_pass(self, batch: Any) -> tuple[list[Call], Any]:
        calls: list[Call] = []
        stack: list[Call] = []
        counters: dict[str, int] = defaultdict(int)
        clock = [0]
        snap = Snapshots()

        def pre(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            name = self.names[id(mod)]
            c = Call(name, counters[name], stack[-1] if stack else None)
            counters[name] += 1
            if c.parent is not None:
                c.parent.callees.append(c)
            calls.append(c)
            stack.append(c)
            rec = self.record(name)
            c.inputs = keep_state(map_tensors(snap, (args, kwargs)))
            rec.input_max_abs = max(rec.input_max_abs, peak_of(c.inputs))

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

        with hooked(self.model, pre, post):
            out = call(self.model, batch)
        return calls, out

    def local(self, c: Call) -> None:
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
            stats.ref_peak = peak_of(c.output)
        else:
            stats.add(c.output, out, self.limits)
            if (
                not inside
                and c.name
                and self.dtype in float_dtypes((args, kwargs))
                and self.original in float_dtypes(out)
            ):
                leaks.append(f"returns {dtype_name(self.original)} from {dtype_name(self.dtype)}")
        rec.local.merge(stats)
        rec.handed.merge(handed)
        if exc_text and rec.local_exception is None:
            rec.local_exception = exc_text
        if leaks and rec.leak is None:
            rec.leak = leaks[0]
        c.problem = local_problem(
            stats, exc_text, leaks[0] if leaks else None, self.threshold, self.dtype
        ) or handed_problem(handed, self.threshold, self.dtype)
        if c.problem is not None and not inside and c.name not in self.probed:
            self.probed.add(c.name)
            probe = OpProbe(self.twins[c.name], c.name, self.dtype, self.ops)
            with contextlib.suppress(Exception), probe:
                self.run_own_code(c, [], ErrorStats())

    def run_own_code(self, c: Call, leaks: list[str], handed: ErrorStats) -> tuple[Any, Any, Any]:
        """The module of call ``c`` in half on its fp32 inputs, callees standing in."""
        twin = self.twins[c.name]
        inside = self.in_island(c.name)
        # copies: the recorded tensors are shared between calls and must not change
        cast = copy_to(self.original if inside else self.dtype)
        args, kwargs = fresh_state(map_tensors(cast, c.inputs), cast)
        queues: dict[str, deque[Call]] = defaultdict(deque)
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
        queue: deque[Call],
        original: Callable[..., Any],
        leaks: list[str],
        handed: ErrorStats,
    ) -> Callable[..., Any]:
        """A forward for callee ``name`` that returns its recorded fp32 results, in order."""
        callee_inside = self.in_island(name)
        out_cast = copy_to(self.original if callee_inside else self.dtype)
        fp32 = self.original

        def forward(*args: Any, **kwargs: Any) -> Any:
            if not queue:  # called more often than in fp32: control flow changed
                return original(*args, **kwargs)
            if queue[0].inputs is not None:
                handed.add(queue[0].inputs, (args, kwargs), self.limits)
            if not callee_inside and fp32 in float_dtypes((args, kwargs)):
                leaks.append(f"passes {dtype_name(fp32)} tensors to half module {name!r}")
            if callee_inside:
                # an island hands its caller back the caller's dtype, whether by hooks or by a
                # mixed-dtype kernel (half in, fp32 parameters, half out)
                given = float_dtypes((args, kwargs))
                cast = copy_to(next(iter(given))) if len(given) == 1 else out_cast
                return map_tensors(cast, queue.popleft().output)
            return map_tensors(out_cast, queue.popleft().output)

        return forward
