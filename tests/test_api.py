"""The public API: ~20 names, one Recipe taken by every entry point in one order."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import halfprec
from halfprec import (
    BenchConfig,
    CheckpointError,
    DTypeError,
    Recipe,
    audit,
    benchmark,
    check,
    convert,
    convert_,
    diagnose,
    export,
    lint,
    load,
    preflight,
    save,
    tune,
)
from halfprec.convert.core import conversion_report
from halfprec.dtypes import HALF_DTYPES, candidate_dtypes


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.lin(x)))


def _inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(4, 8, generator=gen) for _ in range(2)]


FORMS = ["bf16", Recipe(dtype="bf16")]


# -- the public names ------------------------------------------------------------------------
def test_all_is_small_and_every_name_resolves() -> None:
    assert len(halfprec.__all__) <= 25
    assert len(set(halfprec.__all__)) == len(halfprec.__all__)
    for name in halfprec.__all__:
        assert hasattr(halfprec, name), name
    # the clashing names live in their modules only
    assert not {"Variant", "Finding", "TuneVariant", "PreflightFinding"} & set(halfprec.__all__)
    from halfprec.bench.variants import Variant
    from halfprec.leaks.lint import Finding
    from halfprec.preflight import PreflightFinding
    from halfprec.tune import TuneVariant

    assert len({Variant, Finding, PreflightFinding, TuneVariant}) == 4


# -- Recipe ---------------------------------------------------------------------------
def test_of_turns_dtypes_policies_and_none_into_configs() -> None:
    assert Recipe.of(None) == Recipe()
    assert Recipe.of("bf16").dtype == torch.bfloat16
    assert Recipe.of(torch.float16).dtype == torch.float16
    assert Recipe.of(" AUTO").requested == "auto"
    cfg = Recipe(keep_fp32=("lin",))
    assert Recipe.of(cfg) is cfg
    with pytest.raises(TypeError, match="Recipe"):
        Recipe.of(3)  # type: ignore[arg-type]
    with pytest.raises(DTypeError, match="unknown dtype 'fp8'"):
        Recipe.of("fp8")


def test_config_is_checked_on_construction() -> None:
    with pytest.raises(ValueError, match="keep_fp32 entries"):
        Recipe(keep_fp32=(3,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="filter_fn must be callable"):
        Recipe(filter_fn="norm")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="saturate_fills must be True or False"):
        Recipe(saturate_fills="no")  # type: ignore[arg-type]
    assert Recipe(keep_fp32="lin").keep_fp32 == ("lin",)  # type: ignore[arg-type]


def test_a_recipe_file_is_a_recipe_and_replace_changes_its_dtype(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    Recipe(dtype=torch.float16, keep_fp32=("lin",)).save(path)
    loaded = Recipe.of(path)  # a path is read once, here
    assert loaded == Recipe(dtype=torch.float16, keep_fp32=("lin",))
    assert loaded.resolve().dtype == torch.float16
    explicit = loaded.replace(dtype="bf16")
    half = convert(Small(), explicit)
    report = conversion_report(half)
    assert report is not None and report.dtype == torch.bfloat16
    assert "lin" in report.islands  # the file's islands still apply
    assert loaded.replace(dtype="auto").resolve().reason.startswith("auto:")


def test_candidate_dtypes_are_the_one_meaning_of_auto_for_searches() -> None:
    assert candidate_dtypes("auto", "cpu") == HALF_DTYPES  # the CPU runs both
    assert candidate_dtypes("bf16", "cpu") == (torch.bfloat16,)
    assert Recipe().candidates("cpu") == HALF_DTYPES
    assert Recipe(dtype="fp16").candidates("cpu") == (torch.float16,)


def test_norm_islands_is_the_one_name() -> None:
    kept = conversion_report(convert(Small(), Recipe(dtype="fp16")))
    dropped = conversion_report(convert(Small(), Recipe(dtype="fp16", norm_islands=False)))
    assert kept is not None and dropped is not None
    assert kept.islands == {"norm": "norm island (LayerNorm)"} and dropped.islands == {}


# -- every entry point takes a Recipe or a dtype, third after model and inputs --------
@pytest.mark.parametrize("config", FORMS, ids=["str", "config"])
def test_convert_and_convert_(config: Recipe | str) -> None:
    for half in (convert(Small(), config), convert_(Small(), config)):
        report = conversion_report(half)
        assert report is not None and report.dtype == torch.bfloat16


@pytest.mark.parametrize("config", FORMS, ids=["str", "config"])
def test_check_diagnose_preflight_audit(config: Recipe | str) -> None:
    model, inputs = Small().eval(), _inputs()
    assert check(model, inputs, config, runs=0).conversion.dtype == torch.bfloat16
    assert diagnose(model, inputs, config).dtype == torch.bfloat16
    assert preflight(model, inputs, config).dtype == torch.bfloat16
    assert audit(model, inputs, config).dtype == torch.bfloat16


def test_check_takes_islands_from_the_config() -> None:
    cfg = Recipe(dtype="fp16", keep_fp32=("head",), norm_islands=False)
    result = check(Small().eval(), _inputs(), cfg, runs=0)
    assert set(result.conversion.islands) == {"head"}


@pytest.mark.parametrize("config", FORMS, ids=["str", "config"])
def test_tune(config: Recipe | str) -> None:
    result = tune(Small().eval(), _inputs(), config, max_evaluations=3)
    assert result.report.dtype == torch.bfloat16
    assert [v.dtype for v in result.report.variants] == [torch.bfloat16]


def test_tune_keeps_the_configs_islands_in_every_try_and_in_the_recipe() -> None:
    cfg = Recipe(dtype="fp16", keep_fp32=("head",), norm_islands=False)
    result = tune(Small().eval(), _inputs(), cfg, max_evaluations=3)
    assert result.passed and result.model is not None
    report = conversion_report(result.model)
    assert report is not None and "head" in report.islands and "norm" not in report.islands
    assert result.recipe is not None and "head" in result.recipe.keep_fp32
    assert "norm" not in result.recipe.keep_fp32  # norm_islands=False: no norm island


@pytest.mark.parametrize("config", FORMS, ids=["str", "config"])
def test_benchmark_default_variants_follow_the_dtype(config: Recipe | str) -> None:
    bench = BenchConfig(warmup=1, runs=1, memory="none")
    result = benchmark(Small(), _inputs(), config, bench=bench)
    names = [r.name for r in result.results]
    assert names == ["fp32", "naive-bf16", "autocast-bf16", "halfprec-bf16"]


@pytest.mark.parametrize("config", FORMS, ids=["str", "config"])
def test_export(config: Recipe | str, tmp_path: Path) -> None:
    result = export(Small().eval(), _inputs(), tmp_path / "m.ts", config)
    assert result.info.dtype == "bf16" and result.passed


@pytest.mark.parametrize("config", FORMS, ids=["str", "config"])
def test_load_converts_into_the_files_dtype(config: Recipe | str, tmp_path: Path) -> None:
    path = save(convert(Small(), "bf16"), tmp_path / "m.safetensors")
    fresh = load(path, into=Small(), recipe=config)
    report = conversion_report(fresh)
    assert report is not None and report.dtype == torch.bfloat16
    with pytest.raises(CheckpointError, match="holds bf16 tensors but the recipe asks for fp16"):
        load(path, into=Small(), recipe="fp16")


def test_lint_is_one_verb_over_paths_and_sources(tmp_path: Path) -> None:
    code = (
        "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n"
        "    def forward(self, x):\n        return x + torch.zeros(3)\n"
    )
    (tmp_path / "m.py").write_text(code)
    from_source = lint(source=code)
    from_path = lint(tmp_path)
    assert [f.code for f in from_source.findings] == [f.code for f in from_path.findings]
    assert from_source.findings and from_source.files[0].path == "<string>"
    both = lint([tmp_path], source=code)
    assert len(both.files) == 2
    with pytest.raises(ValueError, match="lint needs paths or source"):
        lint()


def test_the_lazy_package_binds_verbs_not_their_submodules() -> None:
    """``halfprec.check`` is the verb even after ``import halfprec.check`` (the module)."""
    import importlib

    import halfprec

    for name in ("check", "tune", "export", "diagnose", "preflight", "compare"):
        importlib.import_module(f"halfprec.{name}")
        assert callable(getattr(halfprec, name)), name
    assert all(hasattr(halfprec, name) for name in halfprec.__all__)
    assert set(halfprec.__all__) <= set(dir(halfprec))
