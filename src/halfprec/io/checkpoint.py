"""Half-size checkpoints in safetensors, never pickle.

``save(model, path)`` writes the converted model's tensors (half, plus the fp32 islands)
with its whole resolved recipe in the metadata (:mod:`halfprec.io.metadata`). The write
is atomic. ``load(path, into=model)`` converts an fp32 ``model`` with that recipe (module
islands, op islands, dtype, boundaries) and loads the tensors, refusing files whose names
or shapes do not match, so the loaded model computes exactly what the saved one did.
``.pt``/``.bin`` state dicts are read with ``torch.load(weights_only=True)`` only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.atomic import write_bytes_atomic
from halfprec.convert.core import ConfigLike, add_note, conversion_report, convert_, recipe_of
from halfprec.convert.recipe import Recipe
from halfprec.dtypes import dtype_kind, dtype_name, is_auto, parse_dtype
from halfprec.errors import CheckpointError
from halfprec.io.hf_dir import RECIPE_FILE
from halfprec.io.metadata import checkpoint_metadata, file_recipe, is_half_checkpoint
from halfprec.io.safeload import UnsafePickleError, load_weights_only

__all__ = ["save", "load", "read_metadata"]


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    """State dict with tied tensors stored once (safetensors refuses shared storage)."""
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    out: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict(keep_vars=False).items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if t.numel() and key in seen:
            continue
        seen[key] = name
        out[name] = t.detach().contiguous()
    return out


def save(
    model: nn.Module, path: str | os.PathLike[str], *, metadata: dict[str, str] | None = None
) -> Path:
    """Write ``model``'s tensors to ``path`` (safetensors, atomic) and return the path.

    The write follows :mod:`halfprec.atomic`: symlinks and file modes are kept, the file is
    fsynced, and a missing folder is an error.
    """
    from safetensors.torch import save as to_bytes

    recipe, report = recipe_of(model), conversion_report(model)
    if recipe is None or report is None:
        meta = {"format": "pt", "dtype": "unconverted", **(metadata or {})}
    else:
        meta = checkpoint_metadata(recipe, report.original_dtype, metadata)
    dest = Path(path)
    # serialized to bytes, then into halfprec's own temp file: safetensors' save_file
    # would leave a temp file of its own making behind on kill -9
    write_bytes_atomic(dest, to_bytes(_state(model), metadata=meta))
    return dest


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The metadata of a halfprec safetensors checkpoint."""
    from safetensors import SafetensorError, safe_open

    p = _existing(path)
    try:
        with safe_open(str(p), framework="pt") as f:
            return dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{p} is not a valid safetensors file ({_first(exc)}); it may be truncated or "
            "corrupt: write it again with `halfprec convert`"
        ) from None


def _existing(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"checkpoint {p} not found; check the path")
    return p


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _read_tensors(p: Path) -> dict[str, torch.Tensor]:
    if p.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(p))
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CheckpointError(
                f"{p} is not a valid safetensors file ({_first(exc)}); it may be truncated "
                "or corrupt: write it again with `halfprec convert`"
            ) from None
    try:
        obj: Any = load_weights_only(p)
    except UnsafePickleError as exc:
        raise CheckpointError(
            f"refusing to unpickle {p}: {exc.detail}, not just tensors; "
            "convert it to safetensors in a trusted environment"
        ) from None
    except (RuntimeError, EOFError, OSError) as exc:
        raise CheckpointError(f"{p} is corrupt or not a torch checkpoint ({_first(exc)})") from None
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{p} does not hold a state dict of tensors; save model.state_dict()")
    return obj


def _check_match(model: nn.Module, tensors: dict[str, torch.Tensor], p: Path) -> None:
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = [k for k in expected if k not in tensors and not _tied(model, k, tensors)]
    unexpected = [k for k in tensors if k not in expected]
    wrong = [
        f"{k} {tuple(tensors[k].shape)} vs model {shape}"
        for k, shape in expected.items()
        if k in tensors and tuple(tensors[k].shape) != shape
    ]
    state = model.state_dict()
    kinds = [
        f"{k} is {dtype_name(tensors[k].dtype)} but the model's is {dtype_name(t.dtype)}"
        for k, t in state.items()
        if k in tensors and dtype_kind(tensors[k].dtype) != dtype_kind(t.dtype)
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
    if kinds:
        problems.append(f"dtype kind {'; '.join(kinds[:3])}")
    if problems:
        raise CheckpointError(
            f"{p} does not match {type(model).__name__}: {' | '.join(problems)}; "
            "load it into the same architecture it was saved from"
        )


def _check_declared_dtype(meta: dict[str, str], tensors: dict[str, torch.Tensor], p: Path) -> None:
    """A halfprec file's tensors are its declared half dtype or fp32 (islands), nothing else."""
    declared = meta["dtype"]
    odd = [
        f"{k} is {dtype_name(t.dtype)}"
        for k, t in tensors.items()
        if t.is_floating_point() and t.dtype != torch.float32 and dtype_name(t.dtype) != declared
    ]
    if odd:
        raise CheckpointError(
            f"{p}: its metadata says {declared} but {', '.join(odd[:3])}"
            f"{' ...' if len(odd) > 3 else ''}; the file was altered after it was written: "
            "write it again with `halfprec convert`"
        )


def _tied(model: nn.Module, name: str, tensors: dict[str, torch.Tensor]) -> bool:
    """True if ``name`` shares storage with a tensor present in the file (a tied weight)."""
    state = model.state_dict()
    ptr = state[name].untyped_storage().data_ptr()
    return any(
        k in tensors and k != name and v.untyped_storage().data_ptr() == ptr
        for k, v in state.items()
    )


def load(
    path: str | os.PathLike[str],
    *,
    into: nn.Module | Callable[[], nn.Module],
    config: ConfigLike = None,
    strict: bool = True,
    upcast: bool = False,
) -> nn.Module:
    """Load a checkpoint into ``into`` and return it.

    ``upcast=True`` loads a half checkpoint's tensors into the unconverted model as they
    are, upcast to its dtype (what ``--weights`` does: the fp32 reference of a half file).

    For a halfprec safetensors file, an unconverted ``into`` is first converted in place
    with the recipe the file carries, so the result computes exactly what the saved model
    did. ``config`` (a :class:`~halfprec.Recipe`), when given, sets the boundary options
    and the tolerance; the file decides the dtype, the module islands and the op islands,
    and a dtype in ``config`` must match the file's. ``into`` may also be a callable that
    builds the fp32 model: it is then built on the meta device and filled straight from a
    safetensors file, so the fp32 model never exists in memory
    (:mod:`halfprec.io.materialize`). A builder that computes on its weights while it
    builds (k-means initialisation) cannot run on meta: it is then built for real, and
    the conversion report says so in its notes.
    """
    if not isinstance(into, nn.Module) and not upcast:
        from halfprec.io.materialize import MetaBuildError, load_built_on_meta

        where = Path(path)
        if where.suffix == ".safetensors" or where.is_dir():
            meta = read_metadata(where) if where.is_file() else {}
            written = where / RECIPE_FILE if where.is_dir() else None
            if written is not None and written.is_file() and (where / "config.json").is_file():
                # a directory save_pretrained wrote: transformers knows its key layout
                from halfprec.convert.swap import base_class
                from halfprec.io.hf_dir import load_pretrained_dir
                from halfprec.io.materialize import build_on_meta

                saved = _with_file(Recipe.of(config), Recipe.load(written), where)
                return load_pretrained_dir(where, base_class(build_on_meta(into)), saved)
            try:
                if is_half_checkpoint(meta) or (written is not None and written.is_file()):
                    saved = Recipe.load(written) if written else file_recipe(meta, where)
                    cfg = _with_file(Recipe.of(config), saved, where)
                    return load_built_on_meta(where, into, config=cfg, in_range=True, strict=strict)
                return load_built_on_meta(where, into, config=config, strict=strict)
            except MetaBuildError as exc:
                note = f"built for real, not on the meta device: {exc.reason}"
                loaded = load(path, into=into(), config=config, strict=strict)
                return add_note(loaded, note)
    if not isinstance(into, nn.Module):
        into = into()
    p = _existing(path)
    tensors = _read_tensors(p)
    meta = read_metadata(p) if p.suffix == ".safetensors" else {}
    halfprec_file = is_half_checkpoint(meta)
    if halfprec_file:
        _check_declared_dtype(meta, tensors, p)
    if halfprec_file and conversion_report(into) is None and not upcast:
        convert_(into, _with_file(Recipe.of(config), file_recipe(meta, p), p))
    if strict:
        _check_match(into, tensors, p)
    state = into.state_dict()
    with torch.no_grad():
        for name, t in tensors.items():
            if name in state:
                state[name].copy_(t.to(state[name].dtype))
    return into


def _with_file(config: Recipe, saved: Recipe, path: Path) -> Recipe:
    """The file's recipe, with the boundary options and tolerance of an explicit
    ``config`` (the default ``Recipe()`` changes nothing): the tensors decide the dtype
    and the islands."""
    asked = config.dtype
    if not is_auto(asked) and parse_dtype(asked) != saved.dtype:
        raise CheckpointError(
            f"{path} holds {dtype_name(parse_dtype(saved.dtype))} tensors but config asks for "
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
