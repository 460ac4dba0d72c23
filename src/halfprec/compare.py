"""Compare a half model against its fp32 reference, output by output.

``compare(reference, candidate, inputs)`` runs both models on the same batches, flattens
nested outputs by path, and reports per path: max/mean abs error, max relative error,
cosine similarity, SQNR (dB), argmax agreement for logits, and non-finite counts, judged
against per-dtype tolerances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.batch import as_batches, call
from halfprec.dtypes import dtype_name
from halfprec.errors import InputsError
from halfprec.tree import flatten

__all__ = [
    "Tolerance",
    "OutputMetrics",
    "Comparison",
    "compare",
    "compare_outputs",
    "run_reference",
]


@dataclass(frozen=True)
class Tolerance:
    """Pass thresholds for one output. ``None`` disables a threshold."""

    min_cosine: float | None = 0.999
    min_sqnr_db: float | None = 25.0
    max_rel_error: float | None = None
    min_argmax_agreement: float | None = None
    allow_nonfinite: bool = False

    def __post_init__(self) -> None:
        if self.min_cosine is not None and not -1.0 <= self.min_cosine <= 1.0:
            raise ValueError(f"min_cosine must be in [-1, 1], got {self.min_cosine}")
        if self.max_rel_error is not None and self.max_rel_error < 0:
            raise ValueError(f"max_rel_error must be >= 0, got {self.max_rel_error}")
        agree = self.min_argmax_agreement
        if agree is not None and not 0.0 <= agree <= 1.0:
            raise ValueError(f"min_argmax_agreement must be in [0, 1], got {agree}")

    @classmethod
    def for_dtype(cls, dtype: torch.dtype | None) -> Tolerance:
        """Defaults: cosine >= 0.999 for both (about 27 dB for unbiased error); SQNR >= 25 dB
        for fp16 (11 significant bits) and >= 20 dB for bf16 (8 bits)."""
        if dtype == torch.bfloat16:
            return cls(min_cosine=0.999, min_sqnr_db=20.0)
        return cls(min_cosine=0.999, min_sqnr_db=25.0)


@dataclass
class OutputMetrics:
    """Errors of one output path, accumulated over all batches."""

    path: str
    shape: tuple[int, ...]
    max_abs: float
    mean_abs: float
    max_rel: float
    cosine: float
    sqnr_db: float
    argmax_agreement: float | None
    nonfinite: int
    reference_nonfinite: int
    passed: bool = True
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "shape": list(self.shape),
            "max_abs": self.max_abs,
            "mean_abs": self.mean_abs,
            "max_rel": self.max_rel,
            "cosine": self.cosine,
            "sqnr_db": self.sqnr_db,
            "argmax_agreement": self.argmax_agreement,
            "nonfinite": self.nonfinite,
            "reference_nonfinite": self.reference_nonfinite,
            "passed": self.passed,
            "failures": self.failures,
        }


@dataclass
class Comparison:
    """The result of :func:`compare`: per-output metrics and a verdict."""

    outputs: list[OutputMetrics]
    tolerance: Tolerance
    batches: int
    dtype: torch.dtype | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems and all(o.passed for o in self.outputs)

    @property
    def worst_cosine(self) -> float:
        return min((o.cosine for o in self.outputs), default=float("nan"))

    def __getitem__(self, path: str) -> OutputMetrics:
        for o in self.outputs:
            if o.path == path:
                return o
        raise KeyError(f"no output {path!r}; outputs are {[o.path for o in self.outputs]}")

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "dtype": dtype_name(self.dtype) if self.dtype is not None else None,
            "batches": self.batches,
            "tolerance": self.tolerance.__dict__,
            "problems": self.problems,
            "outputs": [o.to_json() for o in self.outputs],
        }


def _looks_like_logits(path: str, t: torch.Tensor) -> bool:
    name = path.lower()
    if "logit" in name or "score" in name:
        return t.dim() >= 2 and t.shape[-1] > 1
    return path == "output" and t.dim() == 2 and 1 < t.shape[-1] <= 100_000


class _Accumulator:
    """Running sums for one output path (float64, on CPU)."""

    def __init__(self, path: str, shape: tuple[int, ...]) -> None:
        self.path, self.shape = path, shape
        self.max_abs = 0.0
        self.sum_abs = 0.0
        self.count = 0
        self.ref_peak = 0.0
        self.dot = self.ref_sq = self.cand_sq = self.err_sq = 0.0
        self.agree = self.rows = 0
        self.logits = False
        self.nonfinite = self.ref_nonfinite = 0

    def add(self, ref: torch.Tensor, cand: torch.Tensor) -> None:
        r = ref.detach().to("cpu", torch.float64)
        c = cand.detach().to("cpu", torch.float64)
        self.nonfinite += int((~torch.isfinite(c)).sum())
        self.ref_nonfinite += int((~torch.isfinite(r)).sum())
        both = torch.isfinite(r) & torch.isfinite(c)
        rf, cf = r[both], c[both]
        d = (rf - cf).abs()
        if d.numel():
            self.max_abs = max(self.max_abs, float(d.max()))
            self.ref_peak = max(self.ref_peak, float(rf.abs().max()))
        self.sum_abs += float(d.sum())
        self.count += d.numel()
        self.dot += float((rf * cf).sum())
        self.ref_sq += float((rf * rf).sum())
        self.cand_sq += float((cf * cf).sum())
        self.err_sq += float((d * d).sum())
        if _looks_like_logits(self.path, ref):
            self.logits = True
            self.agree += int((ref.argmax(-1) == cand.argmax(-1)).sum())
            self.rows += ref.argmax(-1).numel()

    def result(self, tol: Tolerance) -> OutputMetrics:
        denom = math.sqrt(self.ref_sq * self.cand_sq)
        if denom > 0:
            cosine = self.dot / denom
        else:
            cosine = 1.0 if self.ref_sq == self.cand_sq else 0.0
        if self.err_sq == 0:
            sqnr = math.inf
        elif self.ref_sq == 0:
            sqnr = -math.inf
        else:
            sqnr = 10 * math.log10(self.ref_sq / self.err_sq)
        m = OutputMetrics(
            path=self.path,
            shape=self.shape,
            max_abs=self.max_abs,
            mean_abs=self.sum_abs / self.count if self.count else 0.0,
            max_rel=self.max_abs / self.ref_peak if self.ref_peak > 0 else 0.0,
            cosine=cosine,
            sqnr_db=sqnr,
            argmax_agreement=self.agree / self.rows if self.logits and self.rows else None,
            nonfinite=self.nonfinite,
            reference_nonfinite=self.ref_nonfinite,
        )
        _judge(m, tol)
        return m


def _judge(m: OutputMetrics, tol: Tolerance) -> None:
    new_nonfinite = m.nonfinite - m.reference_nonfinite
    if new_nonfinite > 0 and not tol.allow_nonfinite:
        m.failures.append(f"{new_nonfinite} non-finite values (inf/NaN) not in the reference")
    if tol.min_cosine is not None and m.cosine < tol.min_cosine:
        m.failures.append(f"cosine {m.cosine:.6f} < {tol.min_cosine}")
    if tol.min_sqnr_db is not None and m.sqnr_db < tol.min_sqnr_db:
        m.failures.append(f"SQNR {m.sqnr_db:.1f} dB < {tol.min_sqnr_db} dB")
    if tol.max_rel_error is not None and m.max_rel > tol.max_rel_error:
        m.failures.append(f"max rel error {m.max_rel:.3g} > {tol.max_rel_error}")
    agree = tol.min_argmax_agreement
    if agree is not None and m.argmax_agreement is not None and m.argmax_agreement < agree:
        m.failures.append(f"argmax agreement {m.argmax_agreement:.3f} < {agree}")
    m.passed = not m.failures


def compare_outputs(
    reference_outputs: list[Any],
    candidate_outputs: list[Any],
    *,
    tolerance: Tolerance | None = None,
    dtype: torch.dtype | None = None,
) -> Comparison:
    """Compare already computed outputs (one entry per batch)."""
    tol = tolerance if tolerance is not None else Tolerance.for_dtype(dtype)
    accs: dict[str, _Accumulator] = {}
    problems: list[str] = []
    for i, (ref_out, cand_out) in enumerate(zip(reference_outputs, candidate_outputs, strict=True)):
        ref, cand = flatten(ref_out), flatten(cand_out)
        if set(ref) != set(cand):
            missing = sorted(set(ref) ^ set(cand))[:3]
            problems.append(f"batch {i}: output paths differ ({', '.join(missing)})")
        for path, r in ref.items():
            c = cand.get(path)
            if c is None:
                continue
            if r.shape != c.shape:
                problems.append(f"{path}: shape {tuple(c.shape)} != reference {tuple(r.shape)}")
                continue
            if not (r.is_floating_point() or r.is_complex()):
                if not torch.equal(r, c.to(r.dtype)):
                    problems.append(f"{path}: non-floating output differs from the reference")
                continue
            acc = accs.setdefault(path, _Accumulator(path, tuple(r.shape)))
            acc.add(r, c)
    return Comparison(
        outputs=[a.result(tol) for a in accs.values()],
        tolerance=tol,
        batches=len(reference_outputs),
        dtype=dtype,
        problems=problems,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_reference(model: nn.Module, batches: list[Any]) -> list[Any]:
    """Run the fp32 reference on every batch; a failure here means the inputs are wrong."""
    outs = []
    with torch.inference_mode():
        for b in batches:
            try:
                outs.append(call(model, b))
            except (RuntimeError, TypeError, ValueError, IndexError, KeyError) as exc:
                raise InputsError(
                    f"the fp32 model failed on the given inputs ({_first_line(exc)}); check "
                    "their names, shapes and dtypes against the model's forward()"
                ) from exc
    return outs


def compare(
    reference: nn.Module,
    candidate: nn.Module,
    inputs: Any,
    *,
    tolerance: Tolerance | None = None,
) -> Comparison:
    """Run ``reference`` and ``candidate`` on ``inputs`` (one batch, or a list of batches).

    The candidate's compute dtype (from its conversion report, else its first floating
    parameter) selects the default tolerance. The result's ``.passed`` is the verdict.
    """
    from halfprec.convert.core import conversion_report

    batches = as_batches(inputs)
    report = conversion_report(candidate)
    if report is not None:
        dtype: torch.dtype | None = report.dtype
    else:
        dtype = next((p.dtype for p in candidate.parameters() if p.is_floating_point()), None)
    ref_out = run_reference(reference, batches)
    try:
        with torch.inference_mode():
            cand_out = [call(candidate, b) for b in batches]
    except (RuntimeError, TypeError, ValueError, IndexError) as exc:
        return Comparison(
            outputs=[],
            tolerance=tolerance if tolerance is not None else Tolerance.for_dtype(dtype),
            batches=len(batches),
            dtype=dtype,
            problems=[f"the half model raised {type(exc).__name__}: {_first_line(exc)}"],
        )
    return compare_outputs(ref_out, cand_out, tolerance=tolerance, dtype=dtype)
