"""The breadth benchmark: is halfprec ever worse than ``copy.deepcopy(model).to(dtype)``?

For one architecture (:mod:`testbed.breadth_models`), plain or stressed, and one
dtype, :func:`run_case` runs

- the fp32 reference (a case whose reference holds inf/NaN is skipped: "reference not
  finite");
- *naive*: ``copy.deepcopy(model).to(dtype)`` on inputs whose floating tensors are cast to
  ``dtype``, judged with halfprec's default tolerance for that dtype;
- *autocast*: the fp32 model under ``torch.autocast(device_type, dtype)``, judged alike;
- *convert*: :func:`halfprec.check` with its defaults;
- *tune* (fp16 only): :func:`halfprec.tune`, with its fp32 share by parameters and FLOPs.

Two rules hold on every case (:meth:`Case.violations`): wherever naive runs and passes,
convert passes; wherever the fp32 reference is finite, tune makes fp16 pass. Where
autocast passes and convert does not is counted in the totals, not a rule.
Used by benchmarks/breadth.py and tests/testbed/test_breadth.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.batch import call
from halfprec.check import check
from halfprec.compare import compare_outputs, run_reference
from halfprec.diagnose import naive_half
from halfprec.dtypes import dtype_name
from halfprec.errors import BrokenReferenceError
from halfprec.modules import first_line
from halfprec.tune import tune
from testbed.breadth_models import Arch, build, example_batch
from testbed.heldout_run import Autocast

__all__ = ["Verdict", "Case", "run_case", "run_arch", "markdown", "violations"]

PASS, FAIL, RAISED, SKIPPED = "pass", "fail", "raised", "-"


@dataclass(frozen=True)
class Verdict:
    """One method on one case: ``status`` is pass, fail (out of tolerance), raised, or
    "-" (not run); ``reason`` says why."""

    status: str
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASS


NOT_RUN = Verdict(SKIPPED)


@dataclass
class Case:
    """One architecture, plain or stressed, in one dtype."""

    arch: str
    kind: str
    stressed: bool
    dtype: torch.dtype
    reference_finite: bool = True
    naive: Verdict = NOT_RUN
    autocast: Verdict = NOT_RUN
    convert: Verdict = NOT_RUN
    tune: Verdict = NOT_RUN
    tune_param_share: float | None = None
    tune_flops_share: float | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def verdicts(self) -> dict[str, Verdict]:
        """Each method's verdict by name, in the table's order."""
        return {
            "naive": self.naive,
            "autocast": self.autocast,
            "convert": self.convert,
            "tune": self.tune,
        }

    @property
    def label(self) -> str:
        return f"{self.arch}{' (stressed)' if self.stressed else ''} {dtype_name(self.dtype)}"

    def violations(self) -> list[str]:
        """Where a rule breaks: convert fails where naive passes, or tune fails on fp16 with
        a finite reference."""
        out = []
        if self.naive.passed and not self.convert.passed:
            out.append(
                f"{self.label}: naive passes but convert {self.convert.status}: "
                f"{self.convert.reason}"
            )
        if self.reference_finite and self.tune.status not in (PASS, SKIPPED):
            out.append(f"{self.label}: tune {self.tune.status}: {self.tune.reason}")
        return out


def violations(cases: Iterable[Case]) -> list[str]:
    return [v for c in cases for v in c.violations()]


def _judge(model: nn.Module, batch: Any, reference: list[Any], dtype: torch.dtype) -> Verdict:
    try:
        with torch.inference_mode():
            out = call(model, batch)
    except Exception as exc:  # any crash of a baseline recipe is its verdict
        return Verdict(RAISED, first_line(exc))
    cmp = compare_outputs(reference, [out], dtype=dtype)
    return Verdict(PASS if cmp.passed else FAIL, cmp.reason)


def _naive(model: nn.Module, batch: Any, reference: list[Any], dtype: torch.dtype) -> Verdict:
    return _judge(naive_half(model, dtype), batch, reference, dtype)


def _autocast(model: nn.Module, batch: Any, reference: list[Any], dtype: torch.dtype) -> Verdict:
    return _judge(Autocast(model, dtype), batch, reference, dtype)


def _convert(model: nn.Module, batch: Any, dtype: torch.dtype) -> Verdict:
    try:
        result = check(model, batch, dtype, runs=0)
    except Exception as exc:  # the library raising is a finding, not a crash of the run
        return Verdict(RAISED, first_line(exc))
    return Verdict(PASS if result.passed else FAIL, result.comparison.reason)


def _tune(case: Case, model: nn.Module, batch: Any, max_evaluations: int) -> None:
    try:
        result = tune(model, batch, case.dtype, max_evaluations=max_evaluations)
    except Exception as exc:  # as in _convert
        case.tune = Verdict(RAISED, first_line(exc))
        return
    report = result.report
    variant = report.variants[0]
    if report.passed:
        islands = len(report.keep_fp32) + len(report.op_islands)
        case.tune = Verdict(PASS, f"{islands} island(s) in {report.passes} passes")
        case.tune_param_share = report.fp32_share
        case.tune_flops_share = report.fp32_flops_share
    else:
        case.tune = Verdict(FAIL, variant.note or report.reason)


def run_case(
    a: Arch,
    model: nn.Module,
    dtype: torch.dtype,
    *,
    stress: bool,
    tune_fp16: bool = True,
    max_evaluations: int = 40,
) -> Case:
    """Run the reference, naive, autocast, convert and (fp16, ``tune_fp16``) tune on ``model``, an
    instance of ``a`` (see the module docs). ``model`` is not changed."""
    start = time.perf_counter()
    case = Case(a.name, a.kind, stress, dtype)
    batch = example_batch(a)
    try:
        reference = run_reference(model, [batch])
    except BrokenReferenceError:
        case.reference_finite = False
        case.notes.append("reference not finite")
        return case
    case.naive = _naive(model, batch, reference, dtype)
    case.autocast = _autocast(model, batch, reference, dtype)
    case.convert = _convert(model, batch, dtype)
    if tune_fp16 and dtype == torch.float16:
        _tune(case, model, batch, max_evaluations)
    case.seconds = time.perf_counter() - start
    return case


def run_arch(
    a: Arch,
    dtypes: Iterable[torch.dtype],
    *,
    twins: Iterable[bool] = (False, True),
    tune_fp16: bool = True,
    max_evaluations: int = 40,
) -> list[Case]:
    """Every case of ``a``: each twin (plain, stressed) in each dtype."""
    cases = []
    for stress in twins:
        model = build(a, stress=stress)
        for dt in dtypes:
            cases.append(
                run_case(
                    a,
                    model,
                    dt,
                    stress=stress,
                    tune_fp16=tune_fp16,
                    max_evaluations=max_evaluations,
                )
            )
    return cases


# markdown ------------------------------------------------------------------------------


def _cell(v: Verdict) -> str:
    return {PASS: "pass", FAIL: "**fail**", RAISED: "**raises**", SKIPPED: "-"}[v.status]


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _tune_cell(c: Case) -> str:
    if c.tune.passed:
        return f"pass ({_share(c.tune_param_share)} / {_share(c.tune_flops_share)})"
    return _cell(c.tune)


def markdown(cases: list[Case]) -> str:
    """The results table (one row per architecture and twin, a column group per dtype),
    per-dtype totals, and the reason for every failure."""
    dtypes = list(dict.fromkeys(c.dtype for c in cases))
    rows: dict[tuple[str, bool], dict[torch.dtype, Case]] = {}
    for c in cases:
        rows.setdefault((c.arch, c.stressed), {})[c.dtype] = c
    tuned = {dt for c in cases if c.tune.status != SKIPPED for dt in [c.dtype]}
    head = ["model", "kind"]
    for dt in dtypes:
        name = dtype_name(dt)
        head += [f"{name} naive", f"{name} autocast", f"{name} convert"]
        head += [f"{name} tune (fp32 params / FLOPs)"] if dt in tuned else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (arch, stress), by_dtype in rows.items():
        first = next(iter(by_dtype.values()))
        cells = [arch + (" (stressed)" if stress else ""), first.kind]
        for dt in dtypes:
            c = by_dtype[dt]
            width = 4 if dt in tuned else 3
            if not c.reference_finite:
                cells += ["reference not finite"] + [""] * (width - 1)
            else:
                verdicts = [_cell(c.naive), _cell(c.autocast), _cell(c.convert), _tune_cell(c)]
                cells += verdicts[:width]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", *_totals(cases, dtypes), "", *_reasons(cases)])


def _totals(cases: list[Case], dtypes: list[torch.dtype]) -> list[str]:
    lines = [
        "| dtype | cases | reference not finite | naive passes | autocast passes "
        "| convert passes | tune passes | convert fails where naive passes "
        "| convert fails where autocast passes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for dt in dtypes:
        mine = [c for c in cases if c.dtype == dt]
        ok = [c for c in mine if c.reference_finite]
        tuned = [c for c in ok if c.tune.status != SKIPPED]
        worse = sum(1 for c in ok if c.naive.passed and not c.convert.passed)
        behind = sum(1 for c in ok if c.autocast.passed and not c.convert.passed)
        tune_text = f"{sum(c.tune.passed for c in tuned)}/{len(tuned)}" if tuned else "-"
        lines.append(
            f"| {dtype_name(dt)} | {len(mine)} | {len(mine) - len(ok)} "
            f"| {sum(c.naive.passed for c in ok)}/{len(ok)} "
            f"| {sum(c.autocast.passed for c in ok)}/{len(ok)} "
            f"| {sum(c.convert.passed for c in ok)}/{len(ok)} | {tune_text} | {worse} | {behind} |"
        )
    return lines


def _reasons(cases: list[Case]) -> list[str]:
    out = []
    for c in cases:
        for what, v in c.verdicts().items():
            if v.status in (FAIL, RAISED):
                out.append(f"- {c.label}, {what} {v.status}: {v.reason}")
    return ["Why each failure failed:", "", *out] if out else []
