"""Compare a half model against its fp32 reference, output by output.

``compare(reference, candidate, inputs)`` runs both models on the same batches, flattens
nested outputs by path, and reports per path: max/mean abs error, max relative error,
cosine similarity, SQNR (dB), argmax agreement for logits, and non-finite counts, judged
against per-dtype tolerances.

No PASS without a finite reference and values actually compared:

- an fp32 reference output holding inf/NaN raises :class:`BrokenReferenceError`;
- any inf/NaN in the candidate (where the reference is finite) fails that output;
- an output with zero values, or a model with no tensor outputs, fails with a reason;
- complex outputs are compared as their real and imaginary parts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.batch import as_batches, call, describe
from halfprec.dtypes import dtype_name
from halfprec.errors import BrokenReferenceError, InputsError, ReferenceFailedError
from halfprec.errorstats import ErrorStats, aligned, as_real
from halfprec.fp32 import exact_fp32, reduced_fp32
from halfprec.modules import first_line
from halfprec.tolerance import Tolerance
from halfprec.tree import flatten, iter_tensors


@dataclass
class OutputMetrics:
    """Errors of one output path, accumulated over all batches.

    ``elements``: values seen; ``compared``: values finite on both sides, the ones the
    error metrics cover (NaN metrics when none); ``nonfinite``: inf/NaN in the half output.
    """

    path: str
    shape: tuple[int, ...]
    max_abs: float
    mean_abs: float
    max_rel: float
    cosine: float
    sqnr_db: float
    argmax_agreement: float | None
    nonfinite: int
    elements: int = 0
    compared: int = 0
    passed: bool = True
    failures: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        """Why this output failed, or what its pass rests on."""
        if self.failures:
            return "; ".join(self.failures)
        return f"{self.compared} values within tolerance"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "shape": list(self.shape),
            "elements": self.elements,
            "compared": self.compared,
            "max_abs": self.max_abs,
            "mean_abs": self.mean_abs,
            "max_rel": self.max_rel,
            "cosine": self.cosine,
            "sqnr_db": self.sqnr_db,
            "argmax_agreement": self.argmax_agreement,
            "nonfinite": self.nonfinite,
            "passed": self.passed,
            "failures": self.failures,
            "reason": self.reason,
        }


@dataclass
class Comparison:
    """The result of :func:`compare`: per-output metrics and a verdict with its reason.

    ``problems``: failures that belong to no single floating output (structure, shapes,
    a half model that raised, no tensor outputs). ``exact_values``: values of integer or
    bool outputs, compared for equality. The reference is IEEE fp32: halfprec computes
    every fp32 reference under :func:`~halfprec.fp32.exact_fp32`; ``set_aside`` names
    what the process had set (e.g. "CUDA matmuls in tf32") that it set aside for it.
    """

    outputs: list[OutputMetrics]
    tolerance: Tolerance
    batches: int
    dtype: torch.dtype | None = None
    problems: list[str] = field(default_factory=list)
    exact_values: int = 0
    set_aside: tuple[str, ...] = field(default_factory=lambda: _set_aside())

    @property
    def reference(self) -> str:
        """One line on the reference: IEEE fp32, and what the process had set instead."""
        if not self.set_aside:
            return "IEEE fp32"
        return f"IEEE fp32 (halfprec set aside this process's {', '.join(self.set_aside)})"

    @property
    def compared(self) -> int:
        """Values actually compared: finite floating values plus exact (integer) values."""
        return sum(o.compared for o in self.outputs) + self.exact_values

    @property
    def passed(self) -> bool:
        return not self.problems and self.compared > 0 and all(o.passed for o in self.outputs)

    @property
    def reason(self) -> str:
        """One line: why the comparison failed, or what its pass rests on."""
        failed = [f"{o.path}: {o.reason}" for o in self.outputs if not o.passed]
        why = self.problems + failed
        if why:
            more = f" (and {len(why) - 3} more)" if len(why) > 3 else ""
            return "; ".join(why[:3]) + more
        if self.compared == 0:
            return "nothing was compared: no tensor values in the outputs"
        return (
            f"{len(self.outputs)} output(s), {self.compared} values compared over "
            f"{self.batches} batch(es), all within tolerance"
        )

    @property
    def worst_cosine(self) -> float:
        return min((o.cosine for o in self.outputs), default=math.nan)

    def __getitem__(self, path: str) -> OutputMetrics:
        for o in self.outputs:
            if o.path == path:
                return o
        raise KeyError(f"no output {path!r}; outputs are {[o.path for o in self.outputs]}")

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reason": self.reason,
            "dtype": dtype_name(self.dtype) if self.dtype is not None else None,
            "batches": self.batches,
            "compared": self.compared,
            "tolerance": self.tolerance.__dict__,
            "reference": "IEEE fp32",
            "reference_set_aside": list(self.set_aside),
            "problems": self.problems,
            "outputs": [o.to_json() for o in self.outputs],
        }


def _set_aside() -> tuple[str, ...]:
    """What this process computes below fp32 when asked for fp32, on the backends it has:
    torch's default TF32 for cuDNN convolutions means nothing where CUDA is not."""
    gpu = torch.cuda.is_available()
    return tuple(r for r in reduced_fp32() if gpu or not r.startswith(("CUDA", "cuDNN")))


def _looks_like_logits(path: str, t: torch.Tensor) -> bool:
    if t.is_complex():
        return False
    name = path.lower()
    if "logit" in name or "score" in name:
        return t.dim() >= 2 and t.shape[-1] > 1
    return path == "output" and t.dim() == 2 and 1 < t.shape[-1] <= 100_000


def _kind(t: torch.Tensor) -> str:
    if t.is_complex():
        return "complex"
    if t.is_floating_point():
        return "floating"
    return "bool" if t.dtype == torch.bool else "integer"


def _broken_reference(path: str, batch: int, t: torch.Tensor) -> BrokenReferenceError:
    r = as_real(t.detach())
    nan, inf = int(torch.isnan(r).sum()), int(torch.isinf(r).sum())
    what = " and ".join(f"{n} {name}" for n, name in ((nan, "NaN"), (inf, "inf")) if n)
    return BrokenReferenceError(
        f"the fp32 reference itself is broken: output {path!r} of batch {batch} holds {what} "
        f"in {r.numel()} values, so no half result can be judged against it; fix the fp32 "
        "run first (NaN/inf in the weights, inputs too large for fp32, a division by zero)"
    )


def _no_tensors(batch: int, out: Any) -> str:
    return (
        f"batch {batch}: the model returned no tensors ({type(out).__name__}), so nothing "
        "was compared; return a tensor, or a dict/tuple/list of tensors"
    )


class _Output:
    """Error statistics and argmax agreement of one output path."""

    def __init__(self, path: str, shape: tuple[int, ...]) -> None:
        self.path, self.shape = path, shape
        self.stats = ErrorStats()
        self.agree = self.rows = 0
        self.logits = False

    def add(self, batch: int, ref: torch.Tensor, cand: torch.Tensor) -> None:
        ref, cand = aligned(ref, cand)
        self.stats.add_tensor(ref, cand)
        if self.stats.reference_nonfinite:
            raise _broken_reference(self.path, batch, ref)
        if _looks_like_logits(self.path, ref):
            self.logits = True
            self.agree += int((ref.argmax(-1) == cand.argmax(-1)).sum())
            self.rows += ref.argmax(-1).numel()

    def result(self, tol: Tolerance) -> OutputMetrics:
        s = self.stats
        m = OutputMetrics(
            path=self.path,
            shape=self.shape,
            max_abs=s.max_abs if s.compared else math.nan,
            mean_abs=s.mean_abs,
            max_rel=s.max_rel,
            cosine=s.cosine,
            sqnr_db=s.sqnr_db,
            argmax_agreement=self.agree / self.rows if self.logits and self.rows else None,
            nonfinite=s.nonfinite,
            elements=s.elements,
            compared=s.compared,
        )
        m.failures = _failures(m, tol)
        m.passed = not m.failures
        return m


def _failures(m: OutputMetrics, tol: Tolerance) -> list[str]:
    if m.elements == 0:
        return ["0 values compared: the output is empty in every batch"]
    out = []
    if m.nonfinite:
        out.append(f"{m.nonfinite} of {m.elements} values are inf/NaN where fp32 is finite")
    if not m.compared:
        return out
    # written as "not (value >= bound)" so that a NaN metric fails too
    if tol.min_cosine is not None and not m.cosine >= tol.min_cosine:
        out.append(f"cosine {m.cosine:.6f} < {tol.min_cosine}")
    if tol.min_sqnr_db is not None and not m.sqnr_db >= tol.min_sqnr_db:
        out.append(f"SQNR {m.sqnr_db:.1f} dB < {tol.min_sqnr_db} dB")
    if tol.max_rel_error is not None and not m.max_rel <= tol.max_rel_error:
        out.append(f"max rel error {m.max_rel:.3g} > {tol.max_rel_error}")
    agree = tol.min_argmax_agreement
    if agree is not None and m.argmax_agreement is not None and m.argmax_agreement < agree:
        out.append(f"argmax agreement {m.argmax_agreement:.3f} < {agree}")
    return out


def compare_outputs(
    reference_outputs: list[Any],
    candidate_outputs: list[Any],
    *,
    tolerance: Tolerance | None = None,
    dtype: torch.dtype | None = None,
) -> Comparison:
    """Compare already computed outputs (one entry per batch).

    Raises :class:`BrokenReferenceError` when a reference output holds inf/NaN.
    """
    tol = (tolerance or Tolerance()).resolve(dtype)  # no recipe here: the dtype's defaults
    outputs: dict[str, _Output] = {}
    problems: list[str] = []
    exact = 0
    no_tensors = False
    pairs = zip(reference_outputs, candidate_outputs, strict=True)
    for i, (ref_out, cand_out) in enumerate(pairs):
        ref, cand = flatten(ref_out), flatten(cand_out)
        if not ref and not no_tensors:
            no_tensors = True
            problems.append(_no_tensors(i, ref_out))
        if set(ref) != set(cand):
            missing = sorted(set(ref) ^ set(cand))[:3]
            problems.append(f"batch {i}: output paths differ ({', '.join(missing)})")
        for path, r in ref.items():
            c = cand.get(path)
            if c is None:
                continue
            if r.shape != c.shape:
                problems.append(f"{path}: shape {tuple(c.shape)} != reference {tuple(r.shape)}")
            elif _kind(r) != _kind(c):
                problems.append(f"{path}: a {_kind(c)} output where fp32 gives {_kind(r)}")
            elif _kind(r) in ("integer", "bool"):
                exact += r.numel()
                same_r, same_c = aligned(r, c)
                if not torch.equal(same_r, same_c.to(same_r.dtype)):
                    problems.append(f"{path}: non-floating output differs from the reference")
            else:
                out = outputs.setdefault(path, _Output(path, tuple(r.shape)))
                out.add(i, r, c)
    return Comparison(
        outputs=[o.result(tol) for o in outputs.values()],
        tolerance=tol,
        batches=len(reference_outputs),
        dtype=dtype,
        problems=problems,
        exact_values=exact,
    )


def reference_failed(index: int, batch: Any, exc: BaseException) -> InputsError:
    """The error for an fp32 model that raised on batch ``index``: these inputs do not fit
    it (any exception, an ``assert`` in ``forward`` included), named with the model's own
    message."""
    return ReferenceFailedError(index, describe(batch), first_line(exc))


def run_reference(model: nn.Module, batches: list[Any]) -> list[Any]:
    """Run the fp32 reference on every batch; a failure here means the inputs are wrong.

    It runs in IEEE fp32 (:func:`~halfprec.fp32.exact_fp32`), whatever the process set
    (TF32 matmuls or convolutions on CUDA, oneDNN's bf16 on CPU), and the process's
    settings are restored afterwards. Raises :class:`InputsError` naming the batch, its
    tensors and the model's own message when the model raises (any ``Exception``: an
    ``assert`` in ``forward`` included), :class:`BrokenReferenceError` when an output
    holds inf/NaN."""
    outs = []
    with torch.inference_mode(), exact_fp32():
        for i, b in enumerate(batches):
            try:
                out = call(model, b)
            except Exception as exc:  # the user's forward(): any error means these inputs
                raise reference_failed(i, b, exc) from exc
            for path, t in iter_tensors(out):
                if (t.is_floating_point() or t.is_complex()) and not bool(
                    torch.isfinite(as_real(t)).all()
                ):
                    raise _broken_reference(path, i, t)
            outs.append(out)
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
    parameter) selects the default tolerance. The result's ``.passed`` is the verdict and
    ``.reason`` says why. Raises :class:`BrokenReferenceError` when the fp32 output holds
    inf/NaN.
    """
    from halfprec.convert.core import conversion_report

    batches = as_batches(inputs)
    report = conversion_report(candidate)
    if report is not None:
        dtype: torch.dtype | None = report.dtype
    else:
        dtype = next((p.dtype for p in candidate.parameters() if p.is_floating_point()), None)
    ref_out = run_reference(reference, batches)
    cand_out = []
    with torch.inference_mode():
        for i, b in enumerate(batches):
            try:
                cand_out.append(call(candidate, b))
            except Exception as exc:  # whatever the half model raises is a FAIL verdict
                return Comparison(
                    outputs=[],
                    tolerance=(tolerance or Tolerance()).resolve(dtype),
                    batches=len(batches),
                    dtype=dtype,
                    problems=[f"batch {i}: the half model raised {first_line(exc)}"],
                )
    return compare_outputs(ref_out, cand_out, tolerance=tolerance, dtype=dtype)
