"""The tensors are the truth: a checkpoint's descriptions are checked against its tensors.

A half checkpoint describes its tensors several times over: the metadata's ``dtype`` and
``keep_fp32``, the recipe (its dtype and every island), the index of a sharded
checkpoint, the ``halfprec_recipe.json`` beside a Hugging Face directory's weights. Any of
them can be edited without touching the tensors. Every load path therefore converts the
model by the description first (on the meta device where it can), and then checks that
each tensor in the file has exactly the dtype the converted model holds it in, before a
single value is copied. A mismatch is a :class:`~halfprec.errors.CheckpointError` that
names the tensor and the field that disagrees with it. A plain checkpoint (no halfprec
metadata) has nothing to disagree with but the model: its tensors must be of the kind
the model holds (floating, integer, bool), and, unless it is read as an upcast reference,
all its floating tensors must share one dtype, since a plain file with fp32 and half
tensors side by side is a half checkpoint that lost its recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from halfprec.dtypes import dtype_kind, dtype_name
from halfprec.errors import CheckpointError

_FIX = "the file was altered after it was written: write it again with `halfprec convert`"


class TensorSource(Protocol):
    """What the checks read of a checkpoint: names, dtypes and shapes, no values."""

    def names(self) -> list[str]: ...

    def dtype(self, name: str) -> torch.dtype: ...

    def shape(self, name: str) -> tuple[int, ...]: ...


def held_dtypes(model: nn.Module) -> dict[str, torch.dtype]:
    """The dtype ``model`` holds each parameter and buffer in, under every name it has
    (tied tensors under each)."""
    found: dict[str, torch.Tensor] = dict(model.named_parameters(remove_duplicate=False))
    found.update(dict(model.named_buffers(remove_duplicate=False)))
    return {n: t.dtype for n, t in found.items()}


def check_against_recipe(
    model: nn.Module, source: TensorSource, path: Path, field: str, half: torch.dtype
) -> None:
    """Every tensor of ``source`` that ``model`` (converted by the recipe ``field`` names,
    whose dtype is ``half``) holds has exactly the dtype the model holds it in; every
    floating tensor, named as the model names it or not, is ``half`` or fp32."""
    held = held_dtypes(model)
    for name in source.names():
        got, want = source.dtype(name), held.get(name)
        if want is None:
            if got.is_floating_point and got not in (half, torch.float32):
                want = half
            else:
                continue  # a name only transformers' key conversions know; checked by name
        if got != want:
            raise CheckpointError(
                f"{path}: tensor {name[:80]!r} is stored as {dtype_name(got)} but {field} "
                f"makes it {dtype_name(want)} ({_why(want, half)}); {_FIX}"
            )


def _why(want: torch.dtype, half: torch.dtype) -> str:
    if want == half:
        return "the recipe's dtype, outside every fp32 island"
    if want == torch.float32:
        return "an fp32 island of the recipe"
    return "as the model holds it"


def check_plain(
    model: nn.Module, source: TensorSource, path: Path, *, one_dtype: bool = True
) -> None:
    """A checkpoint without a recipe: each tensor is of the kind (floating, integer, bool,
    complex) ``model`` holds it in, and, with ``one_dtype``, its floating tensors share one
    dtype (see the module docs)."""
    held = held_dtypes(model)
    for name in source.names():
        got, want = source.dtype(name), held.get(name)
        if want is not None and dtype_kind(got) != dtype_kind(want):
            raise CheckpointError(
                f"{path} does not match {type(model).__name__}: dtype kind {name[:80]} is "
                f"{dtype_name(got)} but the model's is {dtype_name(want)}; load it into the "
                "same architecture it was saved from"
            )
    if one_dtype:
        _one_floating_dtype(source, path)


def _one_floating_dtype(source: TensorSource, path: Path) -> None:
    first: tuple[str, torch.dtype] | None = None
    for name in source.names():
        got = source.dtype(name)
        if not got.is_floating_point:
            continue
        if first is None:
            first = (name, got)
        elif got != first[1]:
            raise CheckpointError(
                f"{path}: tensor {name[:80]!r} is {dtype_name(got)} but {first[0][:80]!r} is "
                f"{dtype_name(first[1])}, and the file has no halfprec recipe to say which "
                "modules are islands; a plain checkpoint holds one floating dtype (a "
                "halfprec checkpoint keeps its metadata: write it again with `halfprec convert`)"
            )
