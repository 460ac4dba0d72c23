"""Recipe: validation, normal forms and the older file formats (found by the mutation pass,
docs/development.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from halfprec import Recipe, Tolerance, convert, load, recipe_of, save
from halfprec.convert import OpRef, RecipeError
from halfprec.convert.op_policy import DEFAULT_FP32_OPS
from halfprec.errors import CheckpointError

FORMAT = "halfprec-recipe/1"


def test_op_islands_and_fp32_ops_are_deduplicated_and_sorted() -> None:
    a, b = OpRef("a", "exp", "m.py:1"), OpRef("b", "exp", "m.py:1", ordinal=2)
    recipe = Recipe(op_islands=(b, a, a), fp32_ops=("sum", "exp", "sum"))
    assert recipe.op_islands == (a, b)
    assert recipe.fp32_ops == ("exp", "sum")
    assert Recipe().fp32_ops == DEFAULT_FP32_OPS and "softmax" in Recipe().fp32_ops


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keep_fp32": (3,)}, "keep_fp32 entries must be module types or qualified names"),
        ({"op_islands": ("exp",)}, "op_islands must be OpRef"),
        ({"fp32_ops": "exp"}, "fp32_ops must be a sequence of torch op names"),
        ({"fp32_ops": ("exp", "")}, "fp32_ops must be a sequence of torch op names"),
        ({"cast_outputs": 1}, "Recipe.cast_outputs must be True or False, got 1"),
        ({"fp32_params_up_to": -1}, "fp32_params_up_to must be a count of values >= 0, got -1"),
        ({"fp32_params_up_to": True}, "fp32_params_up_to must be a count of values >= 0"),
        ({"tolerance": 0.99}, "Recipe.tolerance must be a Tolerance"),
        (
            {"filter_fn": "norm"},
            r"filter_fn must be callable as filter_fn\(module, qualified_name\)",
        ),
        ({"info": ["x"]}, "Recipe.info must be a mapping, got list"),
        ({"fp32_outputs": "gate"}, "fp32_outputs must be a sequence of module names"),
        ({"fp32_outputs": ("gate", "")}, "fp32_outputs must be a sequence of module names"),
    ],
)
def test_bad_fields_are_named(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        Recipe(**kwargs)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "a recipe is a JSON object, got list"),
        ({"format": "x", "dtype": "fp16"}, "not a halfprec recipe"),
        ({"format": "halfprec-recipe/1"}, "recipe is missing 'dtype'"),
        (
            {"format": "halfprec-recipe/1", "dtype": "fp16", "op_islands": {}},
            "op_islands must be a list",
        ),
        ({"format": "halfprec-recipe/1", "dtype": "fp16", "info": []}, "info must be an object"),
        (
            {"format": "halfprec-recipe/1", "dtype": "fp16", "fp32_ops": "exp"},
            "fp32_ops must be a list",
        ),
        (
            {"format": "halfprec-recipe/1", "dtype": "fp16", "fp32_outputs": "gate"},
            "fp32_outputs must be a list of module names",
        ),
    ],
)
def test_bad_json_is_named(data: object, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        Recipe.from_json(data)


def test_an_older_tune_policy_file_loads_without_the_op_policy(tmp_path: Path) -> None:
    """A halfprec-policy/1 file was tuned with no op policy and inputs cast at the root."""
    path = tmp_path / "policy.json"
    path.write_text(
        json.dumps({"format": "halfprec-policy/1", "dtype": "fp16", "keep_fp32": ["0"]})
    )
    old = Recipe.load(path)
    assert old == Recipe(
        "fp16", keep_fp32=("0",), fp32_ops=(), fp32_inputs=False, fp32_params_up_to=0
    )
    new = Recipe.from_json({"format": "halfprec-recipe/1", "dtype": "fp16"})
    assert new.fp32_ops == DEFAULT_FP32_OPS and new.fp32_inputs is True
    assert new.fp32_params_up_to == 0  # written before the field: every parameter half


def test_fp32_params_up_to_round_trips_and_defaults_to_small_tensors() -> None:
    assert Recipe().fp32_params_up_to == 65536
    recipe = Recipe("bf16", fp32_params_up_to=10)
    assert recipe.to_json()["fp32_params_up_to"] == 10
    assert Recipe.loads(recipe.dumps()) == recipe
    assert Recipe.loads(Recipe("bf16").dumps()).fp32_params_up_to == 65536


def test_fp32_outputs_round_trip_and_recipes_saved_before_them_narrow_every_output() -> None:
    recipe = Recipe("fp16", keep_fp32=("b", "a"), fp32_outputs=("b", "a", "b"))
    assert recipe.fp32_outputs == ("a", "b")  # sorted, once each
    assert recipe.to_json()["fp32_outputs"] == ["a", "b"]
    assert Recipe.loads(recipe.dumps()) == recipe
    old = recipe.to_json()
    del old["fp32_outputs"]  # a recipe saved before the field
    assert Recipe.from_json(old) == recipe.replace(fp32_outputs=())
    assert Recipe().fp32_outputs == ()


def test_recipe_files_are_json_with_the_format_and_of_reads_a_path(tmp_path: Path) -> None:
    path = Recipe("bf16", keep_fp32=("head",)).save(tmp_path / "r.json")
    data = json.loads(path.read_text())
    assert data["format"] == "halfprec-recipe/1" and data["dtype"] == "bf16"
    assert Recipe.of(path) == Recipe.of(str(path)) == Recipe("bf16", keep_fp32=("head",))
    assert json.loads(Recipe("bf16").dumps()) == Recipe("bf16").to_json()
    with pytest.raises(RecipeError, match="not found; create one with `halfprec tune -o`"):
        Recipe.load(tmp_path / "missing.json")


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2)).eval()


def test_load_with_a_config_keeps_the_file_s_islands_and_takes_its_boundaries(
    tmp_path: Path,
) -> None:
    half = convert(_net(), Recipe("fp16", keep_fp32=("2",)))
    path = save(half, tmp_path / "m.safetensors")
    plain = load(path, into=_net)
    assert recipe_of(plain) == recipe_of(half)  # no config: exactly the saved recipe
    kept = load(path, into=_net, recipe=Recipe(cast_outputs=False))
    got = recipe_of(kept)
    assert got is not None and got.cast_outputs is False and "2" in got.keep_fp32
    assert got.dtype == torch.float16 and got.op_islands == recipe_of(half).op_islands  # type: ignore[union-attr]
    assert kept(torch.ones(1, 4)).dtype == torch.float16  # outputs stay half, as asked
    with pytest.raises(CheckpointError, match="holds fp16 tensors but the recipe asks for bf16"):
        load(path, into=_net, recipe="bf16")


def test_op_island_kinds_round_trip_and_fp32_refs_are_written_as_before(tmp_path: Path) -> None:
    wide = OpRef("gram", "matmul", "m.py:3", ordinal=0)
    scaled = OpRef("gram", "bmm", "m.py:4", ordinal=1, kind="scaled")
    assert set(wide.to_json()) == {"module", "op", "location", "occurrence", "ordinal"}
    assert scaled.to_json()["kind"] == "scaled"
    old = {"module": "gram", "op": "matmul", "location": "m.py:3", "ordinal": 0}
    assert OpRef.from_json(old) == wide and wide.kind == "fp32"  # saved before kinds
    recipe = Recipe("fp16", op_islands=(scaled, wide))
    assert Recipe.from_json(json.loads(json.dumps(recipe.to_json()))) == recipe
    assert Recipe.load(recipe.save(tmp_path / "r.json")).op_islands == recipe.op_islands
    assert str(scaled) == "gram: bmm at m.py:4 #0 (scaled half)"


def test_bad_op_island_kinds_are_named() -> None:
    with pytest.raises(ValueError, match="OpRef.kind must be 'fp32' or 'scaled', got 'half'"):
        OpRef("", "matmul", "m.py:1", kind="half")
    with pytest.raises(ValueError, match="only a GEMM of two operands can be scaled .*kind='fp32'"):
        OpRef("", "exp", "m.py:1", kind="scaled")
    both = (OpRef("", "mm", "m.py:1"), OpRef("", "mm", "m.py:1", kind="scaled"))
    with pytest.raises(ValueError, match="both as 'fp32' and as 'scaled'; keep one"):
        Recipe("fp16", op_islands=both)
    with pytest.raises(RecipeError, match="recipe is malformed: OpRef.kind must be"):
        Recipe.from_json(
            {
                "format": FORMAT,
                "dtype": "fp16",
                "op_islands": [{"module": "", "op": "mm", "location": "m.py:1", "kind": 2}],
            }
        )


# -- settle: the one rule "an explicit tolerance, else the recipe's" -------------------------
def test_settle_judges_by_the_recipes_tolerance_unless_one_is_given() -> None:
    recipe = Recipe(dtype="fp16", tolerance=Tolerance(min_sqnr_db=200.0))
    settled = recipe.settle("cpu")
    assert settled.dtypes == (torch.float16,)
    assert settled.judge(torch.float16).min_sqnr_db == 200.0
    assert settled.judge(torch.float16).min_cosine == Tolerance.for_dtype(torch.float16).min_cosine
    given = Tolerance(min_sqnr_db=10.0)
    assert recipe.settle("cpu", tolerance=given).judge(torch.float16).min_sqnr_db == 10.0


def test_settle_of_auto_tries_every_half_dtype_the_device_runs() -> None:
    from halfprec.dtypes import candidate_dtypes

    assert Recipe().settle("cpu").dtypes == candidate_dtypes("auto", "cpu")


def test_settle_refuses_a_tolerance_that_is_not_one() -> None:
    with pytest.raises(TypeError, match="halfprec.Tolerance"):
        Recipe(dtype="bf16").settle("cpu", tolerance=0.99)  # type: ignore[arg-type]
