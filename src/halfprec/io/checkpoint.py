"""Half-size checkpoints in safetensors, never pickle.

``save(model, path)`` writes the converted model's tensors (half, plus the fp32 islands)
with its whole resolved recipe in the metadata (:mod:`halfprec.io.metadata`). The write
is atomic. ``load(path, into=model)`` converts an fp32 ``model`` with that recipe (module
islands, op islands, dtype, boundaries) and loads the tensors, refusing files whose names,
shapes or dtypes do not match (:mod:`halfprec.io.truth`: the tensors are the truth), so
the loaded model computes exactly what the saved one did. Every check reads the file's
header only, so a refused file changes nothing in the model.

:func:`checkpoint_format` tells the three formats apart, and each has its loader: a
safetensors file or sharded checkpoint, a Hugging Face directory that
:func:`~halfprec.io.hf_dir.save_pretrained_dir` wrote, and a ``.pt``/``.bin`` state dict
(read with ``torch.load(weights_only=True)`` only).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from halfprec.atomic import write_bytes_atomic
from halfprec.convert.core import RecipeLike, add_note, conversion_report, convert_, recipe_of
from halfprec.convert.recipe import Recipe
from halfprec.convert.swap import base_class
from halfprec.dtypes import dtype_name, is_auto, parse_dtype
from halfprec.errors import CheckpointError
from halfprec.io.hf_dir import RECIPE_FILE, load_pretrained_dir
from halfprec.io.materialize import MetaBuildError, build_on_meta, load_built_on_meta
from halfprec.io.metadata import checkpoint_metadata, claimed_recipe
from halfprec.io.safeload import UnsafePickleError, load_weights_only
from halfprec.io.tensorfile import TensorFile
from halfprec.io.truth import check_against_recipe, check_plain
from halfprec.modules import first_line
from halfprec.readfile import open_regular, refusal

__all__ = ["save", "load", "read_metadata", "checkpoint_format"]

Format = Literal["hf_dir", "safetensors", "torch"]


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    """State dict with tied tensors stored once (safetensors refuses shared storage); an
    entry safetensors cannot hold faithfully is refused (:func:`_unsavable`)."""
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict(keep_vars=False).items():
        problem = _unsavable(name, t)
        if problem:
            raise CheckpointError(f"halfprec.save: {type(model).__name__}'s {problem}")
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if t.numel() and key in seen:
            continue
        seen[key] = name
        out[name] = t.detach().contiguous()
    return out


def _unsavable(name: str, value: object) -> str:
    """Why the state dict entry ``name`` cannot go into a safetensors file as it is: not a
    tensor (``get_extra_state`` or a state-dict hook), sparse or quantized, or without data
    (meta); "" when it can."""
    if not isinstance(value, torch.Tensor):
        return (
            f"state dict entry {name!r} is a {type(value).__name__}, not a tensor (from "
            "get_extra_state or a state-dict hook), which safetensors cannot hold; make it "
            "a tensor buffer, or save that state yourself beside the checkpoint"
        )
    if value.is_quantized:
        return f"tensor {name!r} is quantized, which safetensors cannot hold; .dequantize() it"
    if value.layout != torch.strided:
        return (
            f"tensor {name!r} is {value.layout}, which safetensors cannot hold; make it "
            "dense with .to_dense() before saving"
        )
    if value.is_meta:
        return (
            f"tensor {name!r} is on the meta device and holds no values; load or "
            "materialize the weights before saving"
        )
    return ""


def _saved_module(model: object) -> nn.Module:
    """The module ``save`` writes: ``model`` itself, or the module ``torch.compile``
    compiled (its parameters, names and recipe are the original's). A deployed result, any
    other object, or a module with a runtime's module inside is refused."""
    if not isinstance(model, nn.Module):
        inner = getattr(model, "model", None)
        fix = (
            "pass its .model (a runtime's choice: its own .save(path))"
            if isinstance(inner, nn.Module)
            else "pass the nn.Module that holds the weights"
        )
        raise CheckpointError(
            f"halfprec.save takes an nn.Module; got {type(model).__name__}: {fix}"
        )
    inner = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
    module: nn.Module = inner if isinstance(inner, nn.Module) else model
    for name, sub in module.named_modules():
        runtime = getattr(sub, "runtime", None)
        if name and isinstance(runtime, str) and callable(getattr(sub, "save", None)):
            raise CheckpointError(
                f"halfprec.save: {type(module).__name__}'s submodule {name!r} runs in "
                f"{runtime}, whose weights no checkpoint of the torch model holds; write it "
                f"with {name}.save(path) (its own file), or save the torch model it came from"
            )
    return module


def save(
    model: nn.Module, path: str | os.PathLike[str], *, metadata: dict[str, str] | None = None
) -> Path:
    """Write ``model``'s tensors to ``path`` (safetensors, atomic) and return the path.

    The write follows :mod:`halfprec.atomic`: symlinks and file modes are kept, the file is
    fsynced, and missing folders are made (and removed again if the write fails). A module
    that holds no tensors (a deployed runtime's :class:`~halfprec.runtimes.RuntimeModule`,
    whose weights live in the runtime) is refused: its checkpoint would be empty and load
    as nothing; so is a module holding one, and any state a safetensors file cannot hold
    as it is (non-tensor extra state, sparse, quantized or meta tensors). A module
    ``torch.compile`` returned is saved as the module it compiled.
    """
    from safetensors.torch import save as to_bytes

    model = _saved_module(model)
    state = _state(model)
    if not state:
        raise CheckpointError(_nothing_to_save(model))
    recipe, report = recipe_of(model), conversion_report(model)
    if recipe is None or report is None:
        meta = {"format": "pt", "dtype": "unconverted", **(metadata or {})}
    else:
        meta = checkpoint_metadata(recipe, report.original_dtype, metadata)
    dest = Path(path)
    # serialized to bytes, then into halfprec's own temp file: safetensors' save_file
    # would leave a temp file of its own making behind on kill -9
    write_bytes_atomic(dest, to_bytes(state, metadata=meta))
    return dest


def _nothing_to_save(model: nn.Module) -> str:
    runtime = getattr(model, "runtime", None)
    what = f"{type(model).__name__}" + (f" ({runtime})" if isinstance(runtime, str) else "")
    fix = (
        f"its weights live in {runtime}: write {runtime}'s own file with model.save(path) "
        "(OpenVINO IR .xml, or .onnx for onnxruntime), or save the torch model it came from"
        if isinstance(runtime, str)
        else "save the module that holds the weights"
    )
    return f"halfprec.save: {what} holds no tensors, so its checkpoint would be empty; {fix}"


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The metadata of a halfprec safetensors checkpoint (of every shard, for a sharded one)."""
    return dict(TensorFile(path).metadata)


def checkpoint_format(path: Path) -> Format:
    """Which of the three formats ``path`` holds: ``"hf_dir"`` (a folder with
    ``config.json`` and ``halfprec_recipe.json``), ``"safetensors"`` (a file, an index, or
    a folder holding ``model.safetensors`` or an index) or ``"torch"`` (a pickled state
    dict, read with ``weights_only=True``)."""
    if path.is_dir():
        own = (path / RECIPE_FILE, path / "config.json")
        return "hf_dir" if all(os.path.lexists(f) for f in own) else "safetensors"
    if path.suffix == ".safetensors" or path.name.endswith(".index.json"):
        return "safetensors"
    return "torch"


class _StateDict:
    """A ``.pt``/``.bin`` state dict, read as the checks and the copy read a TensorFile."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tensors = _read_state_dict(path)

    def names(self) -> list[str]:
        return list(self.tensors)

    def dtype(self, name: str) -> torch.dtype:
        return self.tensors[name].dtype

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.tensors[name].shape)

    def get(self, name: str) -> torch.Tensor:
        return self.tensors[name]


Source = TensorFile | _StateDict


def _read_state_dict(p: Path) -> dict[str, torch.Tensor]:
    problem = refusal("checkpoint", p)
    if problem is not None:
        raise CheckpointError(problem)
    try:
        with open_regular(p) as f:
            obj: Any = load_weights_only(f)
    except UnsafePickleError as exc:
        raise CheckpointError(
            f"refusing to unpickle {p}: {exc.detail}, not just tensors; "
            "convert it to safetensors in a trusted environment"
        ) from None
    except (RuntimeError, EOFError, OSError) as exc:
        raise CheckpointError(
            f"{p} is corrupt or not a torch checkpoint ({first_line(exc)}); give weights "
            "written by torch.save(model.state_dict(), path) or a .safetensors file"
        ) from None
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{p} does not hold a state dict of tensors; save model.state_dict()")
    return obj


def _check_match(model: nn.Module, source: Source, p: Path) -> None:
    """Names and shapes, from the header: before any value is copied."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    names = source.names()
    missing = [k for k in expected if k not in names and not _tied(model, k, names)]
    unexpected = [k for k in names if k not in expected]
    wrong = [
        f"{k} {source.shape(k)} vs model {shape}"
        for k, shape in expected.items()
        if k in names and source.shape(k) != shape
    ]
    problems = []
    if missing:
        problems.append(f"missing {', '.join(missing[:3])}" + (" ..." if len(missing) > 3 else ""))
    if unexpected:
        problems.append(
            f"unexpected {', '.join(unexpected[:3])}" + (" ..." if len(unexpected) > 3 else "")
        )
    if wrong:
        problems.append(f"shape {'; '.join(wrong[:3])}")
    if problems:
        raise CheckpointError(
            f"{p} does not match {type(model).__name__}: {' | '.join(problems)}; "
            "load it into the same architecture it was saved from"
        )


def _tied(model: nn.Module, name: str, names: list[str]) -> bool:
    """True if ``name`` shares storage with a tensor present in the file (a tied weight)."""
    state = model.state_dict()
    ptr = state[name].untyped_storage().data_ptr()
    return any(
        k in names and k != name and v.untyped_storage().data_ptr() == ptr for k, v in state.items()
    )


def _on_meta(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose parameters are on the meta device (buffers are copied):
    what a recipe would make of the model, found without touching it."""
    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = type(p)(p.detach().to("meta"), requires_grad=p.requires_grad)
    return copy.deepcopy(model, memo)


def _file_recipe(where: Path, source: TensorFile) -> tuple[Recipe | None, str]:
    """The recipe that describes the tensors of ``source`` (None for a plain checkpoint),
    and the field it was read from, for messages."""
    sidecar = where / RECIPE_FILE if where.is_dir() else None
    if sidecar is not None and os.path.lexists(sidecar):
        recipe = Recipe.load(sidecar)
        if not recipe.resolved:
            raise CheckpointError(
                f"{sidecar}: the recipe has no concrete dtype; write the folder again with "
                "`halfprec convert`"
            )
        return recipe, f"{RECIPE_FILE} (beside the weights)"
    return claimed_recipe(source.metadata, where), "the recipe in its metadata"


def load(
    path: str | os.PathLike[str],
    *,
    into: nn.Module | Callable[[], nn.Module],
    recipe: RecipeLike = None,
    strict: bool = True,
    upcast: bool = False,
) -> nn.Module:
    """Load a checkpoint into ``into`` and return it.

    ``upcast=True`` loads a half checkpoint's tensors into the unconverted model as they
    are, upcast to its dtype (what ``--weights`` does: the fp32 reference of a half file).

    For a halfprec safetensors file, an unconverted ``into`` is first converted in place
    with the recipe the file carries, so the result computes exactly what the saved model
    did. ``recipe`` (a :class:`~halfprec.Recipe` or a dtype), when given, sets the boundary options
    and the tolerance; the file decides the dtype, the module islands and the op islands,
    and a dtype in ``recipe`` must match the file's. ``into`` may also be a callable that
    builds the fp32 model: it is then built on the meta device and filled straight from a
    safetensors file, so the fp32 model never exists in memory
    (:mod:`halfprec.io.materialize`). A builder that computes on its weights while it
    builds (k-means initialisation) cannot run on meta: it is then built for real, and
    the conversion report says so in its notes.

    Every description of the tensors (metadata, recipe, index, side-car recipe) is
    checked against them first (:mod:`halfprec.io.truth`); a mismatch, a missing or an
    extra tensor is :class:`CheckpointError`, and the model is left as it was.
    """
    where = Path(path)
    kind = checkpoint_format(where)
    if kind == "torch":
        model = into if isinstance(into, nn.Module) else into()
        return _load_into_model(_StateDict(where), None, "", model, recipe, strict, upcast)
    source = TensorFile(where)
    carried, field = _file_recipe(where, source)
    if upcast or isinstance(into, nn.Module):
        model = into if isinstance(into, nn.Module) else into()
        return _load_into_model(source, carried, field, model, recipe, strict, upcast)
    if kind == "hf_dir":
        assert carried is not None  # a hf_dir has its side-car recipe
        saved = _with_file(Recipe.of(recipe), carried, where)
        return _load_dir_built(where, into, saved)
    return _load_built(source, carried, field, into, recipe, strict)


def _load_dir_built(where: Path, build: Callable[[], nn.Module], recipe: Recipe) -> nn.Module:
    """A Hugging Face folder into the class of the model ``build`` makes: on the meta
    device, or for real where it cannot run there (a builder that calls from_pretrained)."""
    try:
        built = build_on_meta(build)
    except MetaBuildError as exc:
        model = load_pretrained_dir(where, base_class(build()), recipe)
        return add_note(model, f"built for real, not on the meta device: {exc.reason}")
    return load_pretrained_dir(where, base_class(built), recipe)


def _load_built(
    source: TensorFile,
    recipe: Recipe | None,
    field: str,
    build: Callable[[], nn.Module],
    config: RecipeLike,
    strict: bool,
) -> nn.Module:
    """A safetensors checkpoint into the model ``build`` makes on the meta device."""
    try:
        if recipe is None:
            return load_built_on_meta(source, build, config=config, strict=strict)
        cfg = _with_file(Recipe.of(config), recipe, source.path)
        return load_built_on_meta(
            source, build, config=cfg, in_range=True, strict=strict, described_by=field
        )
    except MetaBuildError as exc:
        model = _load_into_model(source, recipe, field, build(), config, strict, upcast=False)
        return add_note(model, f"built for real, not on the meta device: {exc.reason}")


def _load_into_model(
    source: Source,
    recipe: Recipe | None,
    field: str,
    model: nn.Module,
    config: RecipeLike,
    strict: bool,
    upcast: bool,
) -> nn.Module:
    """Check ``source`` against ``model`` (converted by ``recipe`` on the meta device
    first), then convert ``model`` and copy the tensors in."""
    p = source.path
    if strict:
        _check_match(model, source, p)
    if recipe is None:
        check_plain(model, source, p, one_dtype=not upcast)
    else:
        assert not isinstance(recipe.dtype, str)  # a file's recipe is resolved
        converted = conversion_report(model) is not None
        cfg = _with_file(Recipe.of(config), recipe, p)
        target = model if converted else convert_(_on_meta(model), cfg)
        check_against_recipe(target, source, p, field, recipe.dtype)
        if not converted and not upcast:
            convert_(model, cfg)
    state = model.state_dict()
    with torch.no_grad():
        for name in source.names():
            if name in state:
                state[name].copy_(source.get(name).to(state[name].dtype))
    return model


def _with_file(config: Recipe, saved: Recipe, path: Path) -> Recipe:
    """The file's recipe, with the boundary options and tolerance of an explicit
    ``config`` (the default ``Recipe()`` changes nothing): the tensors decide the dtype
    and the islands."""
    asked = config.dtype
    if not is_auto(asked) and parse_dtype(asked) != saved.dtype:
        raise CheckpointError(
            f"{path} holds {dtype_name(parse_dtype(saved.dtype))} tensors but the recipe asks for "
            f"{dtype_name(parse_dtype(asked))}; load it without a dtype, or convert the fp32 "
            "model again"
        )
    if config == Recipe(dtype=asked):
        return saved
    return config.replace(
        dtype=saved.dtype,
        keep_fp32=(*saved.keep_fp32, *config.keep_fp32),
        norm_islands=saved.norm_islands,
        op_islands=saved.op_islands,
        fp32_outputs=(*saved.fp32_outputs, *config.fp32_outputs),
        filter_fn=None,
        info=saved.info,
    )
