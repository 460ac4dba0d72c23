from __future__ import annotations

import math

import pytest
import torch

from halfprec.dtypes import range_of
from halfprec.errorstats import ErrorStats
from support.tuned import HostSyncs


def test_overflow_in_half_counts_beyond_range_and_nonfinite() -> None:
    stats = ErrorStats()
    stats.add_tensor(
        torch.tensor([70000.0, 1.0]), torch.tensor([math.inf, 1.0]), range_of(torch.float16)
    )
    assert (stats.beyond_range, stats.nonfinite, stats.compared) == (1, 1, 1)
    assert stats.ref_peak == 70000.0 and stats.rel_error == math.inf


def test_merge_equals_one_pass_over_the_concatenation() -> None:
    torch.manual_seed(0)
    r1, r2 = torch.randn(50), torch.randn(30)
    c1, c2 = (r1 + 0.01 * torch.randn(50)).half(), (r2 + 0.01 * torch.randn(30)).half()
    a, b, whole = ErrorStats(), ErrorStats(), ErrorStats()
    a.add_tensor(r1, c1)
    b.add_tensor(r2, c2)
    a.merge(b)
    whole.add_tensor(torch.cat([r1, r2]), torch.cat([c1, c2]))
    for name in ("ref_sq", "cand_sq", "err_sq", "sum_abs", "max_abs"):
        assert getattr(a, name) == pytest.approx(getattr(whole, name), rel=1e-5), name
    assert (a.elements, a.compared) == (80, 80)
    assert a.cosine == pytest.approx(whole.cosine, abs=1e-7)


def test_complex_pairs_count_real_and_imaginary_parts() -> None:
    stats = ErrorStats()
    ref = torch.tensor([1 + 1j, 2 - 1j])
    stats.add_tensor(ref, ref.conj())
    assert stats.compared == 4 and stats.err_sq == pytest.approx(8.0)


def test_nothing_compared_gives_nan_metrics() -> None:
    stats = ErrorStats()
    stats.add_tensor(torch.zeros(0), torch.zeros(0))
    assert math.isnan(stats.cosine) and math.isnan(stats.sqnr_db) and stats.elements == 0


@pytest.mark.parametrize("scale", [1e-24, 1e-30, 1e-40])
def test_tiny_outputs_are_not_equal_when_the_half_result_underflowed(scale: float) -> None:
    """fp32 squares of values below ~1e-19 underflow; the sums must not read 0 == 0."""
    torch.manual_seed(0)
    ref = torch.randn(64) * scale
    underflowed = ref.half()  # all (signed) zeros in fp16
    assert not underflowed.any()
    stats = ErrorStats()
    stats.add_tensor(ref, underflowed)
    assert stats.ref_sq > 0 and stats.err_sq == pytest.approx(stats.ref_sq)
    assert stats.cosine == 0.0 and stats.sqnr_db == pytest.approx(0.0, abs=1e-9)
    assert stats.rel_error == pytest.approx(1.0)


def test_tiny_outputs_of_opposite_sign_are_anticorrelated() -> None:
    torch.manual_seed(0)
    ref = torch.randn(64) * 1e-24
    stats = ErrorStats()
    stats.add_tensor(ref, -ref)
    assert stats.cosine == pytest.approx(-1.0)
    assert stats.sqnr_db == pytest.approx(10 * math.log10(1 / 4))


def test_tiny_equal_outputs_are_equal() -> None:
    ref = torch.full((8,), 1e-30)
    stats = ErrorStats()
    stats.add_tensor(ref, ref.clone())
    assert stats.cosine == 1.0 and stats.sqnr_db == math.inf and stats.err_sq == 0.0


def test_a_pair_is_read_from_the_device_once_and_twice_only_where_inf_or_nan_is() -> None:
    """Every reduction of a pair is computed where the tensors are and read in one
    transfer (the common case); a pair with inf/NaN takes one more, its masked float64
    pass. Counted with the dispatch-mode counter (copies to the host and scalar reads)."""
    r = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    stats = ErrorStats()
    with HostSyncs() as syncs:
        stats.add_tensor(r, r.bfloat16().float(), range_of(torch.bfloat16))
    assert syncs.count == 1
    assert 0 < stats.rel_error < 0.01 and stats.compared == r.numel()
    bad_r, bad_c = r.clone(), r.clone()
    bad_r[0, 0], bad_c[1, 1] = float("inf"), float("nan")
    with HostSyncs() as syncs:
        stats.add_tensor(bad_r, bad_c)
    assert syncs.count == 2
    assert stats.nonfinite == 2 and stats.reference_nonfinite == 1
