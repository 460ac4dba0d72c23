"""File-to-file conversion of an fp32 safetensors checkpoint to half, one tensor at a time.

``convert_file(src, dst, build, dtype)`` builds the model on the meta device (no memory;
see :mod:`halfprec.io.materialize`) only to decide, exactly as :func:`halfprec.convert`
does, which modules stay fp32 islands: the default norm islands, ``keep_fp32``, and any
module whose values in the file overflow the half dtype. It then reads each tensor of
``src`` (one file or a sharded checkpoint with ``model.safetensors.index.json``), casts it
to the dtype its module got, writes it to ``dst`` and lets it go. Peak memory is about one
fp32 tensor and its half copy, whatever the checkpoint's size. ``dst`` is written
atomically and carries halfprec's metadata, so ``halfprec.load(dst, into=build)`` loads it
ready to run.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from halfprec.atomic import atomic_path
from halfprec.convert.core import (
    ConversionReport,
    RecipeLike,
    conversion_report,
    convert_,
    recipe_of,
)
from halfprec.convert.recipe import Recipe
from halfprec.io.materialize import (
    Builder,
    build_on_meta,
    check_covers,
    check_names,
    existing_modules,
    overflowing_modules,
)
from halfprec.io.metadata import checkpoint_metadata
from halfprec.io.tensorfile import TensorFile, TensorWriter
from halfprec.io.truth import check_plain


def convert_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    build: Builder,
    recipe: RecipeLike = "bf16",
    *,
    device: str | torch.device = "cpu",
) -> ConversionReport:
    """Write a half copy of checkpoint ``src`` to ``dst`` (see module docs) and return
    the conversion report of the model ``build`` makes (islands, sizes). ``recipe``: a
    :class:`Recipe` or a dtype (``"auto"`` resolves for ``device``)."""
    cfg = Recipe.of(recipe)
    choice = cfg.resolve(device)
    half = choice.dtype
    source = TensorFile(src)
    if Path(dst).suffix != ".safetensors":
        raise ValueError(f"output {dst} must end in .safetensors")
    model = build_on_meta(build)
    check_names(model, source)
    check_covers(model, source)  # a file without all the model's tensors converts to a broken one
    check_plain(model, source, source.path)  # kinds, and one floating dtype (no lost recipe)
    extra = existing_modules(model, overflowing_modules(source, half))
    convert_(model, cfg.replace(dtype=half, keep_fp32=(*cfg.keep_fp32, *extra)))
    report, recipe = conversion_report(model), recipe_of(model)
    assert report is not None and recipe is not None  # convert_ always attaches them
    held = _dtypes_by_name(model)
    targets: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}
    for name in source.names():
        file_dtype = source.dtype(name)
        target = held.get(name, half) if file_dtype.is_floating_point else file_dtype
        targets[name] = (target, source.shape(name))
    metadata = checkpoint_metadata(
        recipe, report.original_dtype, {"converted_from": Path(src).name}
    )
    with atomic_path(Path(dst)) as tmp, open(tmp, "wb") as f:
        writer = TensorWriter(f, targets, metadata)
        for name, (target, _) in targets.items():
            writer.write(name, source.get(name).to(target))
        writer.close()
    return dataclasses.replace(report, reason=choice.reason)  # "auto" resolved for ``device``


def _dtypes_by_name(model: torch.nn.Module) -> dict[str, torch.dtype]:
    """The dtype the converted model holds each state-dict tensor in."""
    found: dict[str, torch.Tensor] = dict(model.named_parameters(remove_duplicate=False))
    found.update(dict(model.named_buffers(remove_duplicate=False)))
    return {n: t.dtype for n, t in found.items()}
