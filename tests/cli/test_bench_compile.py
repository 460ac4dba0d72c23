"""``halfprec bench --compile``: the line under the table that names the twins a default
run left out (the rows are built by hand; nothing here compiles)."""

from __future__ import annotations

import torch

from halfprec.bench.machine import machine_info
from halfprec.bench.results import BenchResult, VariantResult
from halfprec.bench.variants import parse_variants
from halfprec.cli.bench import _chosen_variants, _footer


def _result() -> BenchResult:
    result = BenchResult("m", "cpu", machine_info("cpu"), "samples")
    for v in parse_variants(None, compile=True):  # fp16 probed slow: its rows skipped
        result.results.append(VariantResult(v, 8, "skipped" if v.dtype == torch.float16 else "ok"))
    return result


def test_a_default_compile_run_names_the_twins_it_left_out_of_variants_that_ran() -> None:
    notes = _footer(_result(), None, compile_default=True)
    assert notes == {
        "not_compiled": "compiled only the ways deploy may choose; name naive-bf16+compile "
        "or autocast-bf16+compile in --variants to time them"
    }
    assert _footer(_result(), None, compile_default=False) == {}


def test_a_twin_named_in_variants_is_kept() -> None:
    chosen = _chosen_variants("fp32,naive-bf16+compile", True)
    assert chosen is not None and "naive-bf16+compile" in [v.name for v in chosen]
