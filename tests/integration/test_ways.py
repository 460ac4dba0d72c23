"""A way of running a model added from outside the package, with one class and one
``register`` call: bench runs it, deploy can choose it, the CLI lists and runs it, and
withdrawing it takes it out of all three."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import halfprec
from halfprec.bench.results import BenchConfig
from halfprec.bench.variants import Variant, VariantError, default_variants
from halfprec.bench.ways import WAYS, Way, register, unregister
from halfprec.convert.recipe import Recipe
from support import SUPPORT
from support.cli import run_cli

MODELS = str(SUPPORT / "export_models.py")


class _Twin(nn.Module):
    """The caller's model, called through one more module: the way's own wrapper."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)


class Twin(Way):
    """A test-only way: the fp32 model in a wrapper (so it is accurate by construction)."""

    name = "twin"
    summary = "the fp32 model in a wrapper module (a test-only way)"
    dtypes = (torch.float32,)
    choosable = True
    saving = "the wrapped model's own weights"

    def build(self, model: nn.Module, dtype: torch.dtype, recipe: Recipe, batch: Any) -> nn.Module:
        return _Twin(model)


@pytest.fixture
def twin() -> Iterator[Way]:
    way = Twin()
    register(way)
    try:
        yield way
    finally:
        unregister(way.name)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def _x() -> torch.Tensor:
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(0))


class _Clock:
    """A scripted timer: each variant's calls take its fixed seconds."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds

    def __call__(self, fn: object, variant: Variant) -> float:
        return self.seconds[variant.name]


QUICK = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=None, race=None, limit=False)


def test_bench_runs_a_registered_way(twin: Way) -> None:
    result = halfprec.benchmark(Block(), _x(), variants=["fp32", "twin-fp32"], bench=QUICK)
    row = result.get("twin-fp32")
    assert row.status == "ok" and row.accurate, row.note
    assert Variant("twin") not in default_variants()  # listed, run when asked for


def test_deploy_chooses_a_registered_way_that_is_fastest(twin: Way) -> None:
    clock = _Clock({"fp32": 1.0, "twin-fp32": 0.25, "halfprec-bf16": 0.5})
    model = Block()
    done = halfprec.deploy(
        model, _x(), "bf16", compile=False, bench=QUICK, timer=clock, runtimes=()
    )
    assert sorted(r.name for r in done.report.results) == ["fp32", "halfprec-bf16", "twin-fp32"]
    assert done.variant == "twin-fp32" and done.runtime == "torch"
    assert isinstance(done.model, _Twin) and done.model.model is not model
    slower = _Clock({"fp32": 1.0, "twin-fp32": 0.75, "halfprec-bf16": 0.5})
    again = halfprec.deploy(
        model, _x(), "bf16", compile=False, bench=QUICK, timer=slower, runtimes=()
    )
    assert again.variant == "halfprec-bf16"  # the registered way competes, it is not favoured


def test_the_cli_lists_and_runs_a_registered_way(twin: Way) -> None:
    listed = run_cli("bench", "--list-variants")
    assert listed.returncode == 0, listed.stderr
    assert "twin-fp32\n  the fp32 model in a wrapper module (a test-only way)" in listed.stdout
    assert "deploy may choose it" in listed.stdout.split("twin-fp32", 1)[1]
    ran = run_cli(
        "bench",
        f"{MODELS}:tiny",
        "--variants",
        "fp32,twin-fp32",
        "--runs",
        "2",
        "--warmup",
        "1",
        "--no-memory",
        "--no-limit",
        "--no-skip",
        "--json",
    )
    assert ran.returncode == 0, ran.stderr
    assert '"twin-fp32"' in ran.stdout


def test_a_withdrawn_way_is_gone_from_bench_deploy_and_the_cli() -> None:
    register(Twin())
    unregister("twin")
    assert "twin" not in WAYS
    with pytest.raises(VariantError, match="unknown variant 'twin-fp32'"):
        Variant.parse("twin-fp32")
    assert "twin" not in run_cli("bench", "--list-variants").stdout
    done = halfprec.deploy(Block(), _x(), "bf16", compile=False, bench=QUICK, runtimes=())
    assert all(r.variant.kind != "twin" for r in done.report.results)


def test_register_refuses_what_would_break_a_variant_name() -> None:
    class Dashed(Twin):
        name = "my-way"

    with pytest.raises(ValueError, match="without '-' or '\\+', got 'my-way'"):
        register(Dashed())
    with pytest.raises(ValueError, match="'halfprec' is registered already"):

        class Again(Twin):
            name = "halfprec"

        register(Again())
    with pytest.raises(ValueError, match="'naive' is a built-in way"):
        unregister("naive")
    assert list(WAYS) == ["fp32", "naive", "autocast", "halfprec", "openvino", "onnxruntime"]
