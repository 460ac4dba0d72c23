"""A converted Hugging Face model written as a directory that transformers loads.

``save_pretrained_dir(half, source, outdir)`` writes what ``model.save_pretrained`` writes
(``config.json`` with the half dtype, safetensors weights sharded above
``max_shard_size``, ``generation_config.json`` where the model has one), the source
directory's tokenizer and preprocessor files, and ``halfprec_recipe.json``, the resolved
recipe. The fp32 islands are stored in fp32 in the weights. The directory needs no code of
its own: ``AutoModel*.from_pretrained(outdir)`` loads it with plain transformers, which
casts every weight to the config's dtype except the modules the architecture itself keeps
in fp32 (``_keep_in_fp32_modules``, T5's ``wo``); ``halfprec.load(outdir, into=build)``
restores every island and the whole recipe. :func:`transformers_islands` says which
islands plain transformers keeps.

The directory is written to a temporary sibling, checked there (``verify``), and renamed
into place, so a failure leaves no partial directory; missing parent folders are made
(and removed again when the write fails); an existing non-empty ``outdir`` is refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.atomic import (
    as_write_error,
    ensure_parent,
    made_folders,
    new_file_mode,
    temp_dir,
)
from halfprec.convert.core import recipe_of
from halfprec.convert.recipe import Recipe
from halfprec.dtypes import cast_floating, dtype_name
from halfprec.errors import CheckpointError
from halfprec.io.sentence_layout import copy_module_folders
from halfprec.modules import first_line
from halfprec.tree import map_tensors

__all__ = [
    "RECIPE_FILE",
    "HfDirReport",
    "InputsInDtype",
    "load_pretrained_dir",
    "save_pretrained_dir",
    "transformers_islands",
]

RECIPE_FILE = "halfprec_recipe.json"
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".gguf")
_OWN = ("config.json", "generation_config.json", RECIPE_FILE)
_CONFIG_LIMIT = 16 * 2**20


@dataclass(frozen=True)
class HfDirReport:
    """What :func:`save_pretrained_dir` wrote."""

    path: Path
    files: tuple[str, ...]
    bytes_written: int


def _copy_side_files(source: Path | None, dest: Path) -> list[str]:
    """Tokenizer, processor and other small files of the source directory (not weights,
    not code: a ``.py`` file would make the output need ``trust_remote_code``)."""
    if source is None or not source.is_dir():
        return []
    copied = []
    for f in sorted(source.iterdir()):
        name = f.name
        if not f.is_file() or name in _OWN or name.endswith((*_WEIGHTS, ".py", ".index.json")):
            continue
        shutil.copy2(f, dest / name)
        copied.append(name)
    return copied


def check_new_folder(outdir: str | os.PathLike[str]) -> Path:
    """``outdir`` as a folder to write a model into: new or empty, in a folder that exists
    or can be made; else an error naming it, before any slow work. Creates nothing."""
    dest = Path(outdir)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise CheckpointError(f"{dest} exists and is not an empty folder; pick a new path")
    ensure_parent(dest)
    return dest


def save_pretrained_dir(
    half: nn.Module,
    outdir: str | os.PathLike[str],
    *,
    source: str | os.PathLike[str] | None = None,
    max_shard_size: str | int = "5GB",
    verify: Callable[[Path], None] | None = None,
) -> HfDirReport:
    """Write the converted Hugging Face model ``half`` to ``outdir`` (see module docs).

    ``verify(staged)`` checks the written directory under its temporary name before it is
    renamed into place; when it raises, nothing is left behind."""
    recipe = recipe_of(half)
    half, recipe = _transformer_of(half, recipe)
    if recipe is None or not hasattr(half, "save_pretrained"):
        raise CheckpointError(
            "a Hugging Face directory needs a Hugging Face model converted by halfprec; "
            "for other models write a .safetensors file"
        )
    dest = check_new_folder(outdir)
    with made_folders(dest.parent, dest):  # a failed write removes the folders it made
        _write_dir(half, recipe, dest, source, max_shard_size, verify)
    files = tuple(sorted(f.name for f in dest.iterdir()))
    size = sum((dest / f).stat().st_size for f in files)
    return HfDirReport(dest, files, size)


def _write_dir(
    half: nn.Module,
    recipe: Recipe,
    dest: Path,
    source: str | os.PathLike[str] | None,
    max_shard_size: str | int,
    verify: Callable[[Path], None] | None,
) -> None:
    """:func:`save_pretrained_dir`'s writing, into a temporary folder beside ``dest`` that
    is renamed onto it once written and verified."""
    with temp_dir(dest.parent, dest) as tmp:  # pid in its name: a kill -9 leaves no lasting litter
        try:
            _fill(half, recipe, tmp, source, max_shard_size, verify)
            if dest.exists():
                dest.rmdir()
            os.replace(tmp, dest)
        except BaseException as exc:
            mapped = as_write_error(exc, dest)  # name the folder asked for, not the temp one
            if mapped is not None:
                raise mapped from exc
            raise


def _fill(
    half: nn.Module,
    recipe: Recipe,
    tmp: Path,
    source: str | os.PathLike[str] | None,
    max_shard_size: str | int,
    verify: Callable[[Path], None] | None,
) -> None:
    """Write ``half``'s model folder into ``tmp``, then ``verify`` it."""
    assert not isinstance(recipe.dtype, str)  # a resolved recipe: a concrete dtype
    config: Any = half.config
    previous = getattr(config, "dtype", None)
    config.dtype = recipe.dtype
    try:
        half.save_pretrained(tmp, safe_serialization=True, max_shard_size=max_shard_size)  # type: ignore[operator]
    finally:
        config.dtype = previous
    # save_pretrained writes the dtype of the first floating parameter, which may be a
    # small fp32 one (ViT's cls_token): plain from_pretrained would load all in fp32
    _config_dtype(tmp / "config.json", recipe.dtype)
    recipe.save(tmp / RECIPE_FILE)
    _copy_side_files(Path(source) if source is not None else None, tmp)
    if source is not None and Path(source).is_dir():  # a sentence-transformers folder
        copy_module_folders(Path(source), tmp)
    for written in tmp.rglob("*"):  # safetensors makes its files 0600: give the usual mode
        if written.is_file() and not written.is_symlink():
            written.chmod(new_file_mode())
    if verify is not None:
        verify(tmp)


def _transformer_of(half: nn.Module, recipe: Recipe | None) -> tuple[nn.Module, Recipe | None]:
    """The Hugging Face model to write for ``half``: a sentence-transformers encoder's
    transformer (its recipe's names taken relative to it), else ``half`` itself."""
    from halfprec.io.zoo import SentenceEncoder

    if recipe is None or not isinstance(half, SentenceEncoder):
        return half, recipe
    inner = "encoder."

    def under(name: str) -> str:
        return name.removeprefix(inner)

    keep = tuple(under(n) if isinstance(n, str) else n for n in recipe.keep_fp32)
    ops = tuple(dataclasses.replace(o, module=under(o.module)) for o in recipe.op_islands)
    return half.encoder, recipe.replace(keep_fp32=keep, op_islands=ops)


def _config_dtype(path: Path, dtype: torch.dtype) -> None:
    """Set ``dtype`` in the written config.json, in transformers' own layout."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config["dtype"] = str(dtype).removeprefix("torch.")
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_pretrained_dir(path: Path, cls: Any, recipe: Any) -> nn.Module:
    """The converted model back from a directory :func:`save_pretrained_dir` wrote:
    transformers reads it (its own key conversions included: a checkpoint may store fused
    MoE experts per expert) in fp32, an exact upcast of the half weights, and ``recipe``
    converts it again, which gives back every tensor exactly.

    The tensors are the truth (:mod:`halfprec.io.truth`): ``config.json``'s dtype and
    ``recipe`` (the side-car ``halfprec_recipe.json``) must describe the weights, and a
    tensor the model needs but the weights lack, or one they hold that the model does not
    know, is :class:`CheckpointError` (transformers would only print it, and initialise
    the missing weight at random)."""
    from halfprec.convert.core import convert_
    from halfprec.io.tensorfile import TensorFile
    from halfprec.io.truth import check_against_recipe
    from halfprec.readfile import special_file_in

    special = special_file_in(path)  # transformers opens what it finds without looking
    if special is not None:
        raise CheckpointError(special)
    source = TensorFile(path)  # every shard a regular file, the index checked
    _check_config_dtype(path / "config.json", recipe.dtype)
    model, info = cls.from_pretrained(
        str(path), dtype=torch.float32, trust_remote_code=False, output_loading_info=True
    )
    _check_loading_info(path, info)
    convert_(model.eval(), recipe)
    field = f"{RECIPE_FILE} (beside the weights)"
    check_against_recipe(model, source, path, field, recipe.dtype)
    return model  # type: ignore[no-any-return]


def _check_config_dtype(config: Path, half: torch.dtype) -> None:
    """``config.json``'s ``dtype`` (``torch_dtype`` before transformers 4.56) says the
    recipe's dtype: it is what plain ``from_pretrained`` loads the weights in."""
    from halfprec.readfile import read_text_regular

    try:
        data = json.loads(read_text_regular(config, limit=_CONFIG_LIMIT))
    except (OSError, ValueError, RecursionError) as exc:
        raise CheckpointError(
            f"{config} is not a readable JSON file ({first_line(exc)}); write the folder "
            "again with `halfprec convert`"
        ) from None
    said = data.get("dtype", data.get("torch_dtype")) if isinstance(data, dict) else None
    if isinstance(said, str) and said != str(half).removeprefix("torch."):
        raise CheckpointError(
            f"{config}: its dtype field says {said[:20]!r} but {RECIPE_FILE} says "
            f"{dtype_name(half)}; the folder was altered after it was written: write it again "
            "with `halfprec convert`"
        )


def _check_loading_info(path: Path, info: dict[str, Any]) -> None:
    """Refuse what ``from_pretrained`` only reports: missing, unexpected or reshaped keys."""
    kinds = ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")
    for kind in kinds:
        found = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get(kind) or ())
        if found:
            shown = ", ".join(f[:80] for f in found[:3]) + (" ..." if len(found) > 3 else "")
            what = kind.replace("_keys", "").replace("_msgs", " errors").replace("_", " ")
            raise CheckpointError(
                f"{path}: the weights do not match the model in config.json ({what}: "
                f"{shown}); the folder was altered after it was written: write it again "
                "with `halfprec convert`"
            )


class InputsInDtype(nn.Module):
    """``model`` called with its floating inputs cast to its dtype, as a transformers user
    calls a model loaded in bf16 (``pixel_values.to(model.dtype)``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        dtype = next(p.dtype for p in self.model.parameters() if p.is_floating_point())
        cast = cast_floating(dtype)
        return self.model(*map_tensors(cast, args), **map_tensors(cast, kwargs))


def transformers_islands(half: nn.Module, loaded: nn.Module) -> dict[str, bool]:
    """Per fp32 island of the converted ``half``: does ``loaded`` (plain
    ``from_pretrained`` of the directory) hold its parameters in fp32 too?"""
    report_islands = recipe_of(half)
    if report_islands is None:
        return {}
    params = dict(loaded.named_parameters())
    out: dict[str, bool] = {}
    for name in report_islands.keep_fp32:
        if not isinstance(name, str):
            continue
        own = [p for n, p in params.items() if n == name or n.startswith(f"{name}.")]
        if own:
            out[name] = all(p.dtype == torch.float32 for p in own)
    return out


def describe(report: HfDirReport, islands: dict[str, bool], dtype: torch.dtype) -> list[str]:
    """Lines for the CLI: what was written and which islands only halfprec restores."""
    kept = [n for n, ok in islands.items() if ok]
    lost = [n for n, ok in islands.items() if not ok]
    lines = [f"wrote {report.path}/ ({', '.join(report.files)}), {dtype_name(dtype)}"]
    if islands:
        lines.append(
            f"  plain transformers keeps {len(kept)} of {len(islands)} fp32 islands"
            + (f" ({', '.join(kept[:4])})" if kept else "")
        )
    if lost:
        shown = ", ".join(lost[:4]) + (" ..." if len(lost) > 4 else "")
        lines.append(f"  only halfprec.load restores the others in fp32: {shown}")
    return lines
