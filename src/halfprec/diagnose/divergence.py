"""The *accumulated* error and the culprit: :func:`half_pass` runs the whole half model and
compares every module call's output with its fp32 record; :func:`find_divergence` names
the first call that goes wrong and :func:`blame` the module whose own half computation
broke (the call itself, an enclosing one, or the closest earlier one)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from torch import nn

from halfprec.batch import call
from halfprec.diagnose.local import Diagnoser
from halfprec.diagnose.problems import accumulated_problem
from halfprec.diagnose.recording import Call, hooked
from halfprec.diagnose.results import Divergence
from halfprec.dtypes import dtype_name
from halfprec.errorstats import ErrorStats
from halfprec.modules import first_line

__all__ = ["half_pass", "find_divergence", "blame"]

Key = tuple[str, int]  # (module name, its n-th call)


def half_pass(
    diag: Diagnoser, batch: Any, by_key: dict[Key, Call]
) -> tuple[Any, list[tuple[Key, ErrorStats]], tuple[Key, str] | None]:
    """Run the half model on ``batch``; returns its output, each module call's accumulated
    error in the order the calls end, and the call that raised with its message (if any)."""
    events: list[tuple[Key, ErrorStats]] = []
    stack: list[Key] = []
    counters: dict[str, int] = defaultdict(int)

    def pre(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        name = diag.twin_names[id(mod)]
        stack.append((name, counters[name]))
        counters[name] += 1

    def post(mod: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        key = stack.pop()
        ref = by_key.get(key)
        stats = ErrorStats()
        if ref is not None:
            stats.add(ref.output, output, diag.limits)
        rec = diag.modules.get(key[0])
        if rec is not None:
            rec.accumulated.merge(stats)
            rec.reached = True
        events.append((key, stats))

    raised = None
    out = None
    with hooked(diag.half, pre, post):
        try:
            out = call(diag.half, batch)
        except Exception as exc:  # the half run failing is what we diagnose
            key = stack[-1] if stack else ("", 0)
            raised = (key, first_line(exc))
            rec = diag.modules.get(key[0])
            if rec is not None and rec.half_exception is None:
                rec.half_exception = raised[1]
    return out, events, raised


def find_divergence(
    diag: Diagnoser,
    batch_index: int,
    calls: list[Call],
    events: list[tuple[Key, ErrorStats]],
    raised: tuple[Key, str] | None,
) -> Divergence | None:
    """The first call of the half run that goes wrong (or raises), and its culprit."""
    by_key = {(c.name, c.nth): c for c in calls}
    first: tuple[Key, str] | None = None
    for key, stats in events:
        why = accumulated_problem(stats, diag.threshold, diag.dtype)
        if why is not None:
            first = (key, why)
            break
    if first is None and raised is not None:
        first = (raised[0], f"raises in {dtype_name(diag.dtype)}: {raised[1]}")
    if first is None:
        return None
    (name, nth), why = first
    d = by_key.get((name, nth))
    culprit = blame(d, calls) if d is not None else None
    if culprit is None:
        c_name, c_why = name, "rounding accumulates; no single module breaks on its own"
    else:
        c_name, c_why = culprit.name, culprit.problem or ""
    worst = sorted(
        (o for o in diag.ops.values() if o.ref.module == c_name),
        key=lambda o: o.severity(),
        reverse=True,
    )
    bad = [o for o in worst if o.problem(diag.threshold, diag.dtype) is not None]
    return Divergence(
        culprit_op=(
            f"{bad[0].ref.op} at {bad[0].ref.location} (occurrence {bad[0].ref.occurrence}):"
            f" {bad[0].problem(diag.threshold, diag.dtype)}"
            if bad
            else None
        ),
        module=name,
        type=diag.modules[name].type if name in diag.modules else "",
        call=nth,
        batch=batch_index,
        reason=why,
        culprit=c_name,
        culprit_type=diag.modules[c_name].type if c_name in diag.modules else "",
        culprit_reason=c_why,
    )


def blame(d: Call, calls: list[Call]) -> Call | None:
    """The call to blame for divergence at ``d``: ``d`` itself when its own code breaks,
    else the nearest enclosing call that breaks, else the latest earlier one that does."""
    if d.problem is not None:
        return d
    a = d.parent
    while a is not None:
        if a.problem is not None:
            return a
        a = a.parent
    earlier = [c for c in calls if c.problem is not None and c.end < d.end]
    return max(earlier, key=lambda c: c.end) if earlier else None
