"""Property tests: compare's verdict equals a small oracle written plainly here.

Random nested outputs (dict/list/tuple, empty and zero-size tensors, complex) with inf/NaN
injected at random positions. Values are multiples of 1/4, so fp32 sums are exact and the
oracle's float64 arithmetic agrees with the library's; cases within rounding of a threshold
are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from halfprec.compare import Tolerance, compare_outputs
from halfprec.errors import BrokenReferenceError
from halfprec.errorstats import ErrorStats

TOL = Tolerance(min_cosine=0.999, min_sqnr_db=25.0)
SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf])
# derandomized: the same examples every run, so a failure reproduces (and CI cannot flake)
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- the oracle: plain Python over lists of floats ----------------------------------------------


def leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(obj, torch.Tensor):
        yield prefix or "output", obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from leaves(v, f"{prefix}.{i}" if prefix else str(i))


def numbers(t: torch.Tensor) -> list[float]:
    if t.is_complex():
        return [x for z in t.flatten().tolist() for x in (z.real, z.imag)]
    return [float(x) for x in t.flatten().tolist()]


def oracle(refs: list[Any], cands: list[Any]) -> str | tuple[bool, set[str]]:
    """'broken', or (passed, the paths that fail)."""
    ref_vals: dict[str, list[float]] = {}
    cand_vals: dict[str, list[float]] = {}
    for ref, cand in zip(refs, cands, strict=True):
        for path, t in leaves(ref):
            ref_vals.setdefault(path, []).extend(numbers(t))
        for path, t in leaves(cand):
            cand_vals.setdefault(path, []).extend(numbers(t))
    if any(not math.isfinite(x) for vals in ref_vals.values() for x in vals):
        return "broken"
    failing = set()
    for path, r in ref_vals.items():
        c = cand_vals[path]
        if not r or any(not math.isfinite(x) for x in c):
            failing.add(path)
            continue
        rr = sum(x * x for x in r)
        cc = sum(y * y for y in c)
        err = sum((x - y) ** 2 for x, y in zip(r, c, strict=True))
        dot = sum(x * y for x, y in zip(r, c, strict=True))
        if rr * cc > 0:
            cos = dot / math.sqrt(rr * cc)
        else:
            cos = 1.0 if rr == cc else 0.0
        sqnr = math.inf if err == 0 else (-math.inf if rr == 0 else 10 * math.log10(rr / err))
        assume(abs(cos - 0.999) > 1e-5)
        assume(not math.isfinite(sqnr) or abs(sqnr - 25.0) > 1e-2)
        if cos < 0.999 or sqnr < 25.0:
            failing.add(path)
    return bool(ref_vals) and not failing, failing


# -- strategies ----------------------------------------------------------------------------------


def quarters(draw: st.DrawFn, shape: tuple[int, ...], is_complex: bool) -> torch.Tensor:
    n = math.prod(shape) * (2 if is_complex else 1)
    vals = draw(st.lists(st.integers(-8, 8), min_size=n, max_size=n))
    t = torch.tensor(vals, dtype=torch.float32) / 4
    return torch.view_as_complex(t.reshape(*shape, 2)) if is_complex else t.reshape(shape)


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    return quarters(draw, shape, draw(st.sampled_from([False, False, False, True])))


structures = st.recursive(
    tensors(),
    lambda children: st.one_of(
        st.dictionaries(st.sampled_from("abc"), children, max_size=3),
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
    ),
    max_leaves=4,
)


def rebuild(obj: Any, fn: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: rebuild(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(rebuild(v, fn) for v in obj)
    return obj


def inject(data: st.DataObject, t: torch.Tensor) -> torch.Tensor:
    """``t`` with inf/NaN at 1-2 random positions of its real view."""
    out = t.clone()
    real = torch.view_as_real(out) if out.is_complex() else out
    flat = real.view(-1)
    if flat.numel():
        for _ in range(data.draw(st.integers(1, 2))):
            flat[data.draw(st.integers(0, flat.numel() - 1))] = data.draw(SPECIAL)
    return out


def perturb(data: st.DataObject, t: torch.Tensor) -> torch.Tensor:
    mode = data.draw(st.sampled_from(["same", "scaled", "negated", "other"]))
    if mode == "same":
        c = t.clone()
    elif mode == "scaled":
        c = t * 1.0001
    elif mode == "negated":
        c = -t
    else:
        c = quarters(data.draw, tuple(t.shape), t.is_complex())
    return inject(data, c) if data.draw(st.integers(0, 4)) == 0 else c


# -- properties ----------------------------------------------------------------------------------


@SETTINGS
@given(structures, st.integers(1, 2), st.data())
def test_verdict_equals_the_oracle(ref: Any, batches: int, data: st.DataObject) -> None:
    if data.draw(st.integers(0, 5)) == 0:
        ref = rebuild(ref, lambda t: inject(data, t))
    refs = [ref] * batches
    cands = [rebuild(ref, lambda t: perturb(data, t)) for _ in range(batches)]
    expected = oracle(refs, cands)
    if expected == "broken":
        with pytest.raises(BrokenReferenceError, match="fp32 reference itself is broken"):
            compare_outputs(refs, cands, tolerance=TOL)
        return
    cmp = compare_outputs(refs, cands, tolerance=TOL)
    assert (cmp.passed, {o.path for o in cmp.outputs if not o.passed}) == expected
    assert cmp.reason  # a verdict always says why
    if cmp.passed:
        assert cmp.compared > 0


@SETTINGS
@given(st.data())
def test_nonfinite_values_are_matched_by_position(data: st.DataObject) -> None:
    """ErrorStats (diagnose's view, where fp32 may hold inf/NaN): a position matches when
    both are finite, both NaN, or both inf of the same sign."""
    n = data.draw(st.integers(0, 6))
    value = st.one_of(st.integers(-4, 4).map(float), SPECIAL)
    r = data.draw(st.lists(value, min_size=n, max_size=n))
    c = data.draw(st.lists(value, min_size=n, max_size=n))
    stats = ErrorStats()
    stats.add_tensor(torch.tensor(r), torch.tensor(c))

    def matches(x: float, y: float) -> bool:
        if math.isfinite(x) and math.isfinite(y):
            return True
        return (math.isnan(x) and math.isnan(y)) or x == y

    assert stats.nonfinite == sum(not matches(x, y) for x, y in zip(r, c, strict=True))
    assert stats.compared == sum(
        math.isfinite(x) and math.isfinite(y) for x, y in zip(r, c, strict=True)
    )
    assert stats.reference_nonfinite == sum(not math.isfinite(x) for x in r)
    assert stats.elements == n


# -- magnitudes: subnormal, tiny, huge, opposite-sign and all-zero pairs -------------------------

MAGNITUDES = st.sampled_from([0.0, 1e-44, 1e-38, 1e-30, 1e-24, 1e-12, 1.0, 1e12, 1e30, 1e37])
VARIANTS = st.sampled_from(["half", "bf16", "same", "negated", "zero", "noise", "swapped"])


def f64_verdict(r: list[float], c: list[float]) -> tuple[float, float] | None:
    """(cosine, SQNR) in float64 over plain floats (exact products for fp32 values), or
    None when the pair is too close to a threshold to call."""
    rr = math.fsum(x * x for x in r)
    cc = math.fsum(y * y for y in c)
    err = math.fsum((x - y) ** 2 for x, y in zip(r, c, strict=True))
    dot = math.fsum(x * y for x, y in zip(r, c, strict=True))
    equal = all(x == y for x, y in zip(r, c, strict=True))
    if equal:
        return 1.0, math.inf
    cos = dot / math.sqrt(rr * cc) if rr * cc > 0 else 0.0
    sqnr = -math.inf if rr == 0 else 10 * math.log10(rr / err)
    if abs(cos - 0.999) < 1e-6 or abs(sqnr - 25.0) < 1e-3:
        return None
    return cos, sqnr


@SETTINGS
@given(st.data())
def test_verdict_passes_only_when_the_float64_comparison_does(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 8))
    scale = data.draw(MAGNITUDES)
    units = data.draw(st.lists(st.floats(-2.0, 2.0, width=32), min_size=n, max_size=n))
    ref = (torch.tensor(units, dtype=torch.float64) * scale).float()
    variant = data.draw(VARIANTS)
    if variant == "half":
        cand = ref.half()
    elif variant == "bf16":
        cand = ref.bfloat16()
    elif variant == "same":
        cand = ref.clone()
    elif variant == "negated":
        cand = -ref
    elif variant == "zero":
        cand = torch.zeros_like(ref)
    elif variant == "noise":
        rel = data.draw(st.sampled_from([1e-6, 1e-3, 1e-2, 0.1]))
        cand = ref + rel * scale * torch.tensor(units[::-1], dtype=torch.float32)
    else:
        cand = ref.flip(0)
    assume(bool(torch.isfinite(cand.float()).all()))
    r, c = ref.double().tolist(), cand.double().tolist()
    expected = f64_verdict(r, c)
    assume(expected is not None)
    assert expected is not None
    cos, sqnr = expected
    cmp = compare_outputs([ref], [cand], tolerance=TOL)
    assert cmp.passed == (cos >= 0.999 and sqnr >= 25.0), (cmp.reason, cos, sqnr, r, c)
    m = cmp["output"]
    if math.isfinite(sqnr):  # fp32 sums: a relative error of ~1e-6 is ~4e-6 dB
        assert m.sqnr_db == pytest.approx(sqnr, abs=1e-4)
    assert m.cosine == pytest.approx(cos, abs=1e-6)
