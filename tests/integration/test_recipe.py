"""The recipe travels with the model: JSON, checkpoints, streaming, copies, pickles, compile.

Each test here fails on the code before the recipe (hooks, modes that read frames, a
report in ``__dict__``, checkpoints that carried only the module islands).
"""

from __future__ import annotations

import copy
import io
import pickle
from pathlib import Path

import pytest
import torch
import torch._dynamo as dynamo
from safetensors import safe_open
from torch import nn

import halfprec
from halfprec import Recipe, Tolerance, convert, load, recipe_of, save, tune
from halfprec.compare import compare_outputs
from halfprec.convert import OpRef, RecipeError, conversion_report
from halfprec.io.stream import convert_file
from testbed.hazards import HAZARDS
from testbed.heldout_handoff import ponder
from testbed.root_hazards import ROOT_HAZARDS

RAW_FP16 = Recipe(
    "fp16", fp32_ops=(), fp32_inputs=False, fp32_params_up_to=0
)  # the hazards as .half() meets them: no op policy, every parameter half


class Block(nn.Module):
    """Masked attention-like block: a fill, a factory without dtype, a norm island."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = self.proj(x).masked_fill(mask, -1e9)
        return self.head(self.norm(y.softmax(-1)) + torch.zeros(x.shape[0], 8))


def _block() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    return Block().eval(), (x, x > 0.5)


def _run(model: nn.Module, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    with torch.no_grad():
        return model(*args)  # type: ignore[no-any-return]


# -- the recipe object ----------------------------------------------------------------------
def test_recipe_round_trips_through_json_exactly(tmp_path: Path) -> None:
    ref = OpRef("layers.0", "exp", "model.py:41", 1, ordinal=3)
    recipe = Recipe(
        dtype="fp16",
        keep_fp32=("head", "layers.*.norm"),
        op_islands=(ref,),
        saturate_fills=False,
        cast_outputs=False,
        tolerance=Tolerance(min_cosine=0.9999, max_rel_error=None),
        info={"tool": "test"},
    )
    again = Recipe.from_json(recipe.to_json())
    assert again == recipe and again.to_json() == recipe.to_json()
    assert again.info == {"tool": "test"}
    assert Recipe.load(recipe.save(tmp_path / "r.json")) == recipe


def test_recipe_refuses_what_json_cannot_hold_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="by type or filter_fn"):
        Recipe(keep_fp32=(nn.LayerNorm,)).to_json()
    with pytest.raises(RecipeError, match="by type or filter_fn"):
        Recipe(filter_fn=lambda m, n: False).to_json()
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "halfprec-recipe/1", "dtype": "fp16", "keep_fp32": "head"}')
    with pytest.raises(RecipeError, match="keep_fp32 must be a list"):
        Recipe.load(bad)
    bad.write_text('{"format": "halfprec-recipe/1", "dtype": "fp16", "surprise": 1}')
    with pytest.raises(RecipeError, match="unknown keys"):
        Recipe.load(bad)
    bad.write_text('{"format": "halfprec-recipe/1", "dtype": "fp16", "cast_outputs": "yes"}')
    with pytest.raises(RecipeError, match="cast_outputs must be True or False"):
        Recipe.load(bad)


def test_a_type_selector_or_filter_fn_is_saved_as_the_names_it_selected() -> None:
    model, _ = _block()
    half = convert(model, Recipe(dtype="bf16", keep_fp32=(nn.Linear,), norm_islands=False))
    resolved = recipe_of(half)
    assert resolved is not None and set(resolved.keep_fp32) == {"proj", "head"}
    assert resolved.to_json()["keep_fp32"] == ["proj", "head"]  # saves: names only
    chosen = convert(model, Recipe(dtype="bf16", filter_fn=lambda m, name: name == "head"))
    assert set(recipe_of(chosen).keep_fp32) == {"norm", "head"}  # type: ignore[union-attr]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_tolerance_defaults_follow_the_dtype_of_the_run(dtype: torch.dtype) -> None:
    """README's Tolerance(min_cosine=0.999) demands the run's own SQNR: 25 dB in fp16, 20 dB
    in bf16 (it used to demand fp16's 25 dB in both)."""
    tol = Tolerance(min_cosine=0.99)
    assert tol.resolve(dtype).min_sqnr_db == (25.0 if dtype == torch.float16 else 20.0)
    ref = torch.linspace(1, 2, 1000)
    noisy = ref + 0.16 * torch.sin(torch.arange(1000.0))
    cmp = compare_outputs([ref], [noisy], tolerance=tol, dtype=dtype)
    assert 20 < cmp.outputs[0].sqnr_db < 25 and cmp.outputs[0].cosine > 0.99
    assert cmp.passed == (dtype == torch.bfloat16)
    assert Recipe(dtype=dtype).tolerance_for(dtype) == Tolerance.for_dtype(dtype)


def test_one_public_config_type_and_at_most_25_names() -> None:
    assert len(halfprec.__all__) <= 25
    assert "Recipe" in halfprec.__all__
    assert "ConvertConfig" not in halfprec.__all__ and "Policy" not in halfprec.__all__
    assert not hasattr(halfprec, "Policy")


# -- the converted model is a plain module --------------------------------------------------
def test_islands_and_behaviours_show_in_print() -> None:
    model, _ = _block()
    text = repr(convert(model, "fp16"))
    assert text.splitlines()[0] == (
        "Block[halfprec fp16, autocast fp32 ops, fp32 params <= 65536, saturating fills]("
    )
    raw = repr(convert(model, RAW_FP16)).splitlines()[0]
    assert raw == "Block[halfprec fp16, saturating fills]("
    assert "(norm): LayerNorm[fp32 island]" in text
    assert "(proj): Linear(in_features=8" in text  # a guard alone changes no name


def test_no_hooks_and_no_report_in_dict() -> None:
    model, _ = _block()
    half = convert(model, "fp16")
    for m in half.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
    assert "halfprec_report" not in half.__dict__
    report = conversion_report(half)
    assert report is not None and report.islands == {"norm": "norm island (LayerNorm)"}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_deepcopy_pickle_and_torch_save_round_trip(dtype: str) -> None:
    """A model whose code uses masked_fill used to fail to deepcopy ("cannot pickle
    '_thread._local' object") and torch.save ("Can't pickle local object")."""
    model, args = _block()
    half = convert(model, dtype)
    out = _run(half, args)
    assert torch.isfinite(out).all()
    assert torch.equal(_run(copy.deepcopy(half), args), out)
    assert torch.equal(_run(pickle.loads(pickle.dumps(half)), args), out)
    buf = io.BytesIO()
    torch.save(half, buf)
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    assert torch.equal(_run(again, args), out)
    assert recipe_of(again) == recipe_of(half)
    assert conversion_report(again) == conversion_report(half)


def test_state_dict_loads_into_a_fresh_conversion() -> None:
    model, args = _block()
    half = convert(model, "fp16")
    torch.manual_seed(1)
    fresh = convert(Block().eval(), recipe_of(half))
    fresh.load_state_dict(half.state_dict())
    assert torch.equal(_run(fresh, args), _run(half, args))


def _graphs(model: nn.Module, args: tuple[torch.Tensor, ...]) -> int:
    dynamo.reset()
    return int(dynamo.explain(model)(*args).graph_count)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_compiles_into_as_many_graphs_as_fp32_and_fullgraph_works(dtype: str) -> None:
    """The toy block was 1 graph in fp32, 3 after convert bf16 and 5 after fp16."""
    model, args = _block()
    _compiles_like_fp32(model, args, convert(model, dtype), atol=1e-2)


def _compiles_like_fp32(
    model: nn.Module, args: tuple[torch.Tensor, ...], half: nn.Module, atol: float
) -> None:
    assert _graphs(model, args) == _graphs(half, args) == 1
    dynamo.reset()
    compiled = torch.compile(half, fullgraph=True, backend="eager")
    torch.testing.assert_close(_run(compiled, args), _run(half, args), atol=atol, rtol=atol)


# -- an island that hands its output on in fp32 travels too --------------------------------
def _ponder() -> tuple[nn.Module, tuple[torch.Tensor]]:
    model, batches = ponder()
    return model, batches[0]


def _handoff() -> Recipe:
    return Recipe("fp16", keep_fp32=("step.halt",), fp32_outputs=("step.halt",))


def test_a_hand_off_saves_loads_copies_and_pickles_bit_exactly(tmp_path: Path) -> None:
    model, args = _ponder()
    half = convert(model, _handoff())
    out = _run(half, args)
    assert torch.isfinite(out).all()  # narrowed, the halting probability gives -inf
    path = save(half, tmp_path / "ponder.safetensors")
    for into in (lambda: ponder()[0], ponder()[0]):  # on meta, and into a built model
        loaded = load(path, into=into)
        assert recipe_of(loaded) == recipe_of(half)
        assert recipe_of(loaded).fp32_outputs == ("step.halt",)  # type: ignore[union-attr]
        assert torch.equal(_run(loaded, args), out)
    # a config's boundary options do not drop the file's hand-offs
    kept = load(path, into=lambda: ponder()[0], recipe=Recipe(cast_outputs=False))
    assert recipe_of(kept).fp32_outputs == ("step.halt",)  # type: ignore[union-attr]
    assert torch.equal(_run(kept, args).float(), out)
    buf = io.BytesIO()
    torch.save(half, buf)
    buf.seek(0)
    copies = [copy.deepcopy(half), pickle.loads(pickle.dumps(half))]
    copies.append(torch.load(buf, weights_only=False))
    for again in copies:
        assert torch.equal(_run(again, args), out)
        assert conversion_report(again) == conversion_report(half)


def test_a_hand_off_compiles_into_as_many_graphs_as_fp32_and_exports(tmp_path: Path) -> None:
    model, args = _ponder()
    half = convert(model, _handoff())
    _compiles_like_fp32(model, args, half, atol=0.0)
    result = halfprec.export(model, [args], tmp_path / "ponder.pt2", _handoff())
    assert result.passed
    program = torch.export.load(tmp_path / "ponder.pt2")
    assert torch.equal(program.module()(x=args[0]), _run(half, args))


# -- tuned recipes travel -------------------------------------------------------------------
@pytest.fixture(scope="module")
def tuned_exp() -> tuple[halfprec.tune.TuneResult, nn.Module, list]:  # type: ignore[type-arg]
    model, batches = ROOT_HAZARDS["root-exp-softmax"].build()
    result = tune(model, batches, RAW_FP16)
    assert result.passed and result.recipe is not None and result.recipe.op_islands
    return result, model, batches


def test_tuned_op_islands_are_found_by_ordinal(tuned_exp) -> None:  # type: ignore[no-untyped-def]
    result, _, _ = tuned_exp
    assert all(ref.ordinal is not None for ref in result.recipe.op_islands)


def test_tune_save_load_is_bit_identical_without_a_config(tuned_exp, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The op islands used to be lost on save: load gave inf outputs."""
    result, model, batches = tuned_exp
    path = save(result.model, tmp_path / "tuned.safetensors")
    build = ROOT_HAZARDS["root-exp-softmax"].build
    for into in (lambda: build()[0], build()[0]):  # on meta, and into a built model
        loaded = load(path, into=into)
        assert recipe_of(loaded) == result.recipe
        for b in batches:
            out = _run(loaded, b)
            assert torch.isfinite(out).all()
            assert torch.equal(out, _run(result.model, b))


def test_deepcopy_of_a_tuned_model_keeps_its_op_islands(tuned_exp) -> None:  # type: ignore[no-untyped-def]
    """The copied hooks used to stay bound to the original: the copy computed plain half."""
    result, model, batches = tuned_exp
    copied = copy.deepcopy(result.model)
    plain = convert(model, RAW_FP16)
    out = _run(copied, batches[0])
    assert torch.equal(out, _run(result.model, batches[0]))
    assert not torch.equal(out, _run(plain, batches[0]))


def test_a_location_only_op_island_still_works_and_matches_its_ordinal_form() -> None:
    model, batches = ROOT_HAZARDS["root-exp-softmax"].build()
    result = tune(model, batches, RAW_FP16)
    located = convert(model, RAW_FP16.replace(op_islands=result.report.op_islands))
    assert all(r.ordinal is None for r in result.report.op_islands)
    assert torch.equal(_run(located, batches[1]), _run(result.model, batches[1]))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_streaming_conversion_writes_the_recipe_dtype_and_the_same_tensors(
    dtype: str, tmp_path: Path
) -> None:
    """--weights used to write bf16 for an fp16 recipe: it worked the dtype out itself."""
    model, _ = HAZARDS["rmsnorm-overflow"].build()
    src = tmp_path / "fp32.safetensors"
    save(model, src)
    recipe = Recipe(dtype=dtype, keep_fp32=("norm",))
    streamed = tmp_path / "streamed.safetensors"
    convert_file(src, streamed, lambda: HAZARDS["rmsnorm-overflow"].build()[0], recipe)
    in_memory = save(convert(model, recipe), tmp_path / "memory.safetensors")
    with safe_open(str(streamed), "pt") as a, safe_open(str(in_memory), "pt") as b:
        assert set(a.keys()) == set(b.keys())
        for k in a.keys():  # noqa: SIM118
            assert torch.equal(a.get_tensor(k), b.get_tensor(k)), k
        assert a.metadata()["recipe"] == b.metadata()["recipe"]
        assert a.metadata()["dtype"] == dtype


class BigBatchNorm(nn.Module):
    """A root whose class name matches the norm pattern."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def test_a_root_named_like_a_norm_is_not_one_whole_island(tmp_path: Path) -> None:
    half = convert(BigBatchNorm().eval(), "fp16")
    assert half.lin.weight.dtype == torch.float16
    path = save(half, tmp_path / "m.safetensors")
    loaded = load(path, into=BigBatchNorm)
    x = torch.randn(2, 4)
    assert torch.equal(_run(loaded, (x,)), _run(half, (x,)))


class KMeans(nn.Module):
    """Computes on its own weights in __init__ (a k-means style initialisation)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.centroids = nn.Parameter(torch.randn(4, 8, generator=g))
        self.spread = float(self.centroids.detach().std())  # .item(): no meta tensor has one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.centroids.T) / self.spread


def test_a_builder_that_cannot_run_on_meta_is_built_for_real_and_says_so(tmp_path: Path) -> None:
    torch.manual_seed(0)
    half = convert(KMeans().eval(), "bf16")
    path = save(half, tmp_path / "k.safetensors")
    loaded = load(path, into=KMeans)
    report = conversion_report(loaded)
    assert report is not None and any("meta device" in n for n in report.notes)
    x = torch.randn(3, 8)
    assert torch.equal(_run(loaded, (x,)), _run(half, (x,)))


MASKED_MODEL = """
import torch
from torch import nn


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return self.proj(x).masked_fill(x > 1.5, -1e9).softmax(-1)


def build():
    torch.manual_seed(0)
    return Masked().eval()


def example_inputs():
    return [(torch.randn(4, 8, generator=torch.Generator().manual_seed(1)),)]
"""


def test_check_weights_of_a_halfprec_checkpoint_of_a_masked_fill_model(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """It used to print a 110-line traceback: check deep-copies the loaded model."""
    spec = tmp_path / "masked.py"
    spec.write_text(MASKED_MODEL)
    ckpt = tmp_path / "m.safetensors"
    made = cli("convert", f"{spec}:build", "--dtype", "fp16", "-o", str(ckpt))
    assert made.returncode == 0, made.stderr
    proc = cli("check", f"{spec}:build", "--weights", str(ckpt), "--runs", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
