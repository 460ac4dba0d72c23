"""The one writer and reader of a half checkpoint's safetensors metadata.

Every path that writes a half checkpoint (``halfprec.save``, streaming ``convert
--weights``) builds its metadata here, and every path that reads one (``halfprec.load``,
meta-device loading) reads the recipe back here, so they cannot drift apart::

    format            "pt" (what transformers and safetensors' own tools expect)
    halfprec_format   "halfprec/2"
    recipe            the resolved recipe as JSON (dtype, every island by name, op islands)
    dtype, original_dtype, keep_fp32, halfprec_version, torch_version  (for humans)

Files written by earlier versions (``"format": "halfprec/1"``, islands in ``keep_fp32``
only) still load: their recipe is rebuilt from ``dtype`` and ``keep_fp32``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from halfprec._version import __version__
from halfprec.convert.recipe import Recipe, RecipeError
from halfprec.dtypes import dtype_name
from halfprec.errors import CheckpointError

HALFPREC_FORMAT = "halfprec/2"
_LEGACY_FORMAT = "halfprec/1"
_OWN_KEYS = ("halfprec_format", "halfprec_version", "recipe")


def checkpoint_metadata(
    recipe: Recipe, original: torch.dtype, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The metadata of a half checkpoint converted with the resolved ``recipe``."""
    if not recipe.resolved or isinstance(recipe.dtype, str):
        raise ValueError("checkpoint metadata needs a resolved recipe (from recipe_of(model))")
    meta = {
        "format": "pt",
        "halfprec_format": HALFPREC_FORMAT,
        "halfprec_version": __version__,
        "torch_version": torch.__version__,
        "dtype": dtype_name(recipe.dtype),
        "original_dtype": dtype_name(original),
        "keep_fp32": json.dumps([k for k in recipe.keep_fp32 if isinstance(k, str)]),
        "recipe": recipe.dumps(),
    }
    meta.update(extra or {})
    return meta


def is_half_checkpoint(meta: dict[str, str]) -> bool:
    """True for the metadata of a half checkpoint written by halfprec (any version)."""
    if meta.get("halfprec_format") == HALFPREC_FORMAT:
        return True
    return meta.get("format") == _LEGACY_FORMAT and meta.get("dtype") in ("fp16", "bf16")


def claimed_recipe(meta: dict[str, str], path: Path) -> Recipe | None:
    """The recipe a file's metadata claims (None for a plain checkpoint, which has no
    halfprec field), after checking that the fields written for humans agree with it:
    ``dtype`` is the recipe's dtype, and ``keep_fp32`` its module islands. A file with
    some halfprec fields but not a readable recipe is :class:`CheckpointError`, never
    read as a plain checkpoint. The tensors themselves are checked against the recipe
    once it has converted the model (:mod:`halfprec.io.truth`)."""
    if meta.get("format") != _LEGACY_FORMAT and not any(k in meta for k in _OWN_KEYS):
        return None
    fix = "the file was altered after it was written: write it again with `halfprec convert`"
    if not is_half_checkpoint(meta):
        found = meta.get("halfprec_format", meta.get("format"))
        raise CheckpointError(
            f"{path}: its metadata has halfprec fields but its format is {str(found)[:40]!r}, "
            f"not {HALFPREC_FORMAT!r}; {fix}"
        )
    if "dtype" not in meta:
        raise CheckpointError(f"{path}: its metadata has no dtype field; {fix}")
    recipe = file_recipe(meta, path)
    assert not isinstance(recipe.dtype, str)  # file_recipe returns a resolved recipe
    if meta["dtype"] != dtype_name(recipe.dtype):
        raise CheckpointError(
            f"{path}: its metadata field dtype says {meta['dtype'][:20]!r} but its recipe "
            f"says {dtype_name(recipe.dtype)}; {fix}"
        )
    islands = [k for k in recipe.keep_fp32 if isinstance(k, str)]
    if meta.get("halfprec_format") == HALFPREC_FORMAT and _legacy_keep(meta, path) != islands:
        raise CheckpointError(
            f"{path}: its metadata field keep_fp32 says {meta.get('keep_fp32', '')[:80]} but "
            f"its recipe keeps {json.dumps(islands)[:80]} in fp32; {fix}"
        )
    return recipe


def file_recipe(meta: dict[str, str], path: Path) -> Recipe:
    """The resolved recipe a half checkpoint was written with (see the module docs)."""
    if meta.get("halfprec_format") == HALFPREC_FORMAT:
        try:
            recipe = Recipe.loads(meta.get("recipe", ""))
        except RecipeError as exc:
            raise CheckpointError(
                f"{path}: its recipe metadata is unreadable ({exc}); write the file again "
                "with `halfprec convert`"
            ) from None
        if not recipe.resolved:
            raise CheckpointError(
                f"{path}: its recipe has no concrete dtype; write the file again with "
                "`halfprec convert`"
            )
        return recipe
    # a file of the previous format: its islands, and no op policy (it had none)
    keep = tuple(_legacy_keep(meta, path))
    return Recipe(dtype=meta["dtype"], keep_fp32=keep, fp32_ops=(), fp32_inputs=False)


def _legacy_keep(meta: dict[str, str], path: Path) -> list[str]:
    try:
        keep = json.loads(meta.get("keep_fp32", "[]"))
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(
            f"{path}: its keep_fp32 metadata is not valid JSON ({exc}); write the file again "
            "with `halfprec convert`"
        ) from None
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise CheckpointError(
            f"{path}: its keep_fp32 metadata is not a list of module names; write the file "
            "again with `halfprec convert`"
        )
    return keep
