"""The tensors are the truth: every description of a checkpoint's tensors is checked
against them, on every load path (``load(into=model)``, ``load(into=builder)``, upcast,
``convert --weights``'s ``convert_file``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from halfprec import CheckpointError, convert
from halfprec.convert import Recipe, RecipeError, recipe_of
from halfprec.convert.core import conversion_report
from halfprec.io.checkpoint import load, save
from halfprec.io.stream import convert_file
from halfprec.io.tensorfile import INDEX_NAME

Tensors = dict[str, torch.Tensor]
Meta = dict[str, str]


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 4)).eval()


def _saved(tmp: Path, dtype: str = "fp16") -> tuple[Tensors, Meta]:
    path = save(convert(net(), dtype), tmp / f"valid-{dtype}.safetensors")
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata())  # noqa: SIM118


def _write(path: Path, tensors: Tensors, meta: Meta) -> Path:
    save_file(tensors, str(path), metadata=meta)
    return path


def _with_recipe(meta: Meta, **change: Any) -> Meta:
    recipe = json.loads(meta["recipe"])
    recipe.update(change)
    return {**meta, "recipe": json.dumps(recipe)}


LOADERS: dict[str, Callable[[Path], nn.Module]] = {
    "into=model": lambda p: load(p, into=net()),
    "into=builder": lambda p: load(p, into=net),
}


@pytest.mark.parametrize("how", LOADERS)
def test_a_recipe_dtype_that_disagrees_with_the_tensors_is_refused(
    tmp_path: Path, how: str
) -> None:
    tensors, meta = _saved(tmp_path, "bf16")
    # only the recipe says fp16: it disagrees with the human-readable field
    only = _write(tmp_path / "a.safetensors", tensors, _with_recipe(meta, dtype="fp16"))
    with pytest.raises(CheckpointError, match="metadata field dtype says 'bf16' but its recipe"):
        LOADERS[how](only)
    # every field says fp16 and the tensors are bf16: used to load as fp16 into a builder
    every = _write(
        tmp_path / "b.safetensors", tensors, {**_with_recipe(meta, dtype="fp16"), "dtype": "fp16"}
    )
    with pytest.raises(CheckpointError, match=r"tensor '0.bias' is stored as bf16 but the recipe"):
        LOADERS[how](every)


@pytest.mark.parametrize("how", [*LOADERS, "upcast"])
def test_a_half_module_weight_stored_fp32_is_refused_not_loaded_as_inf(
    tmp_path: Path, how: str
) -> None:
    tensors, meta = _saved(tmp_path)
    tensors["0.weight"] = torch.full((8, 8), 1e6)  # fp32, past fp16's range
    path = _write(tmp_path / "big.safetensors", tensors, meta)
    loader = LOADERS.get(how, lambda p: load(p, into=net(), upcast=True))
    with pytest.raises(
        CheckpointError,
        match=r"tensor '0.weight' is stored as fp32 but the recipe in its metadata makes it "
        r"fp16 \(the recipe's dtype, outside every fp32 island\)",
    ):
        loader(path)


def test_an_island_stored_half_is_refused(tmp_path: Path) -> None:
    tensors, meta = _saved(tmp_path)
    tensors["1.weight"] = tensors["1.weight"].half()
    path = _write(tmp_path / "island.safetensors", tensors, meta)
    with pytest.raises(CheckpointError, match=r"'1.weight' is stored as fp16 .* fp32 island"):
        load(path, into=net)


@pytest.mark.parametrize("how", LOADERS)
def test_an_int16_weight_is_a_checkpoint_error(tmp_path: Path, how: str) -> None:
    tensors, meta = _saved(tmp_path)
    tensors["2.weight"] = torch.ones(4, 8, dtype=torch.int16)
    with pytest.raises(CheckpointError, match=r"'2.weight' is stored as int16"):
        LOADERS[how](_write(tmp_path / "i.safetensors", tensors, meta))
    plain = {k: v.float() for k, v in tensors.items() if k != "2.weight"}
    plain["2.weight"] = torch.ones(4, 8, dtype=torch.int16)  # used to be a RuntimeError
    with pytest.raises(CheckpointError, match=r"dtype kind 2.weight is int16 but the model's"):
        LOADERS[how](_write(tmp_path / "p.safetensors", plain, {"format": "pt"}))


@pytest.mark.parametrize("how", LOADERS)
def test_metadata_without_its_dtype_is_a_checkpoint_error(tmp_path: Path, how: str) -> None:
    tensors, meta = _saved(tmp_path)
    del meta["dtype"]  # used to be KeyError: 'dtype'
    with pytest.raises(CheckpointError, match="its metadata has no dtype field"):
        LOADERS[how](_write(tmp_path / "m.safetensors", tensors, meta))


def test_the_keep_fp32_field_must_list_the_recipe_s_islands(tmp_path: Path) -> None:
    tensors, meta = _saved(tmp_path)
    path = _write(tmp_path / "k.safetensors", tensors, {**meta, "keep_fp32": '["0", "1"]'})
    with pytest.raises(CheckpointError, match=r"keep_fp32 says \[\"0\", \"1\"\] but its recipe"):
        load(path, into=net)


def test_a_half_file_stripped_of_its_format_is_not_read_as_plain(tmp_path: Path) -> None:
    tensors, meta = _saved(tmp_path)
    del meta["halfprec_format"]  # used to load into the unconverted model, upcast
    with pytest.raises(CheckpointError, match="its metadata has halfprec fields but"):
        load(_write(tmp_path / "f.safetensors", tensors, meta), into=net())
    # without any halfprec field, fp16 next to fp32 is a recipe lost: refused too
    path = _write(tmp_path / "g.safetensors", tensors, {"format": "pt"})
    with pytest.raises(CheckpointError, match="the file has no halfprec recipe"):
        load(path, into=net())
    with pytest.raises(CheckpointError, match="the file has no halfprec recipe"):
        convert_file(path, tmp_path / "out.safetensors", net, "fp16")


def test_a_refused_file_leaves_the_model_as_it_was(tmp_path: Path) -> None:
    tensors, meta = _saved(tmp_path)
    tensors["0.weight"] = torch.full((8, 8), 1e6)
    path = _write(tmp_path / "big.safetensors", tensors, meta)
    model = net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError):
        load(path, into=model)
    assert conversion_report(model) is None  # not converted before the check failed
    after = model.state_dict()
    assert all(
        torch.equal(before[k], after[k]) and before[k].dtype == after[k].dtype for k in after
    )


# -- the property: an edited checkpoint loads as the same model, or not at all ------------

NAMES = ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]
# what the tensors can contradict; op-level settings (fp32_ops, boundaries) describe no
# tensor, so nothing in the file can disagree with them
RECIPE_FIELDS = {
    "dtype": ["fp16", "bf16", "fp32", "auto", 3],
    "keep_fp32": [[], ["0"], ["1"], ["0", "1"], ["1", "2"], "1"],
    "norm_islands": [True, False],
    "fp32_params_up_to": [0, 64, 10**9],
}
META_VALUES = ["fp16", "bf16", "fp32", "[]", '["1"]', '["0"]', "halfprec/1", "halfprec/2", "pt"]
META_KEYS = ["dtype", "keep_fp32", "halfprec_format", "format", "original_dtype", "recipe"]

Edit = tuple[str, Any, Any]


def _edits() -> st.SearchStrategy[Edit]:
    name = st.sampled_from(NAMES)
    return st.one_of(
        st.tuples(
            st.just("meta"), st.sampled_from(META_KEYS), st.sampled_from([None, *META_VALUES])
        ),
        st.sampled_from(list(RECIPE_FIELDS)).flatmap(
            lambda f: st.tuples(st.just("recipe"), st.just(f), st.sampled_from(RECIPE_FIELDS[f]))
        ),
        st.tuples(st.just("drop"), name, st.none()),
        st.tuples(st.just("add"), st.sampled_from(["extra", "1.scale"]), st.none()),
        st.tuples(
            st.just("retype"),
            name,
            st.sampled_from(
                [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int16]
            ),
        ),
        st.tuples(st.just("reshape"), name, st.sampled_from(["flat", "column"])),
        st.tuples(
            st.just("index"), name, st.sampled_from(["other shard", "dropped", "ghost", "list"])
        ),
    )


def _apply(edit: Edit, tensors: Tensors, meta: Meta) -> tuple[Tensors, Meta, str | None]:
    kind, what, value = edit
    tensors, meta = dict(tensors), dict(meta)
    if kind == "meta":
        if value is None:
            meta.pop(what, None)
        else:
            meta[what] = value
    elif kind == "recipe" and "recipe" in meta:
        meta = _with_recipe(meta, **{what: value})
    elif kind == "drop":
        del tensors[what]
    elif kind == "add":
        tensors[what] = torch.ones(8)
    elif kind == "retype":
        tensors[what] = tensors[what].to(value)
    elif kind == "reshape":
        t = tensors[what]
        tensors[what] = t.reshape(-1) if value == "flat" and t.dim() > 1 else t.reshape(-1, 1)
    return tensors, meta, (f"{what}:{value}" if kind == "index" else None)


def _write_checkpoint(
    folder: Path, tensors: Tensors, meta: Meta, sharded: bool, index_edit: str | None
) -> Path:
    """One file, or two shards and an index (``index_edit``: what to change in it)."""
    folder.mkdir()
    if not sharded:
        return _write(folder / "model.safetensors", tensors, meta)
    shards = {"a.safetensors": {}, "b.safetensors": {}}  # type: dict[str, Tensors]
    for i, (k, v) in enumerate(sorted(tensors.items())):
        shards["a.safetensors" if i % 2 == 0 else "b.safetensors"][k] = v
    weight_map: Any = {}
    for shard, part in shards.items():
        _write(folder / shard, part, meta)
        weight_map.update(dict.fromkeys(part, shard))
    if index_edit is not None:
        name, change = index_edit.split(":")
        if change == "other shard" and name in weight_map:
            weight_map[name] = (
                "b.safetensors" if weight_map[name] == "a.safetensors" else "a.safetensors"
            )
        elif change == "dropped":
            weight_map.pop(name, None)
        elif change == "ghost":
            weight_map["ghost.weight"] = "a.safetensors"
        else:
            weight_map = list(weight_map)
    (folder / INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def _same_model(got: nn.Module, want: nn.Module) -> None:
    g, w = got.state_dict(), want.state_dict()
    assert list(g) == list(w)
    for k in w:
        assert g[k].dtype == w[k].dtype and torch.equal(g[k], w[k]), k
    r, v = recipe_of(got), recipe_of(want)
    assert r is not None and v is not None
    assert (r.dtype, r.keep_fp32) == (v.dtype, v.keep_fp32)  # what describes the tensors
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(got(x), want(x))


_PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# an edit that changes nothing the tensors say (the recipe's dtype as saved): it must load,
# so a loader that refuses everything fails the properties below
_UNCHANGED: Edit = ("recipe", "dtype", "fp16")


def test_an_edited_half_checkpoint_is_the_same_model_or_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    outcomes: Counter[str] = Counter()

    @_PROPERTY
    @example(edit=_UNCHANGED, sharded=False, builder=True)
    @given(edit=_edits(), sharded=st.booleans(), builder=st.booleans())
    def same_or_refused(edit: Edit, sharded: bool, builder: bool) -> None:
        tmp = tmp_path_factory.mktemp("edit")
        tensors, meta = _saved(tmp)
        want = load(_write_checkpoint(tmp / "valid", tensors, meta, sharded, None), into=net)
        tensors, meta, index_edit = _apply(edit, tensors, meta)
        path = _write_checkpoint(tmp / "edited", tensors, meta, sharded, index_edit)
        try:
            got = load(path, into=net if builder else net())
        except (CheckpointError, RecipeError):
            assert edit != _UNCHANGED, "an unchanged checkpoint was refused"
            outcomes["refused"] += 1
            return
        _same_model(got, want)
        outcomes["loaded"] += 1

    same_or_refused()
    assert outcomes["loaded"] and outcomes["refused"], outcomes  # both sides were seen


def test_an_edited_fp32_checkpoint_converts_to_the_same_file_or_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    outcomes: Counter[str] = Counter()

    @_PROPERTY
    @example(edit=_UNCHANGED, sharded=False)
    @given(edit=_edits(), sharded=st.booleans())
    def same_or_refused(edit: Edit, sharded: bool) -> None:
        tmp = tmp_path_factory.mktemp("stream")
        tensors = {k: v.clone() for k, v in net().state_dict().items()}
        meta = {"format": "pt", "recipe": Recipe(dtype="fp16").dumps()}  # a field to edit
        valid = _write_checkpoint(tmp / "valid", tensors, meta, sharded, None)
        convert_file(valid, tmp / "want.safetensors", net, "fp16")
        tensors, meta, index_edit = _apply(edit, tensors, meta)
        path = _write_checkpoint(tmp / "edited", tensors, meta, sharded, index_edit)
        try:
            convert_file(path, tmp / "got.safetensors", net, "fp16")
        except (CheckpointError, RecipeError):
            assert edit != _UNCHANGED, "an unchanged checkpoint was refused"
            outcomes["refused"] += 1
            return
        got = load_file(str(tmp / "got.safetensors"))
        want = load_file(str(tmp / "want.safetensors"))
        assert list(got) == list(want)
        for k in want:
            assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
        outcomes["loaded"] += 1

    same_or_refused()
    assert outcomes["loaded"] and outcomes["refused"], outcomes  # both sides were seen
