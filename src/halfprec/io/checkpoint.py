"""Half-size checkpoints in safetensors, never pickle.

``save(model, path)`` writes the converted model's tensors (half, plus the fp32 islands)
with metadata: dtype, modules kept in fp32, halfprec and torch versions. The write is
atomic. ``load(path, into=model)`` converts an fp32 ``model`` the same way and loads the
tensors, refusing files whose names or shapes do not match. ``.pt``/``.bin`` state dicts
are read with ``torch.load(weights_only=True)`` only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec._version import __version__
from halfprec.atomic import write_bytes_atomic
from halfprec.convert.core import ConfigLike, ConvertConfig, conversion_report, convert_
from halfprec.dtypes import dtype_kind, dtype_name, is_auto, parse_dtype
from halfprec.errors import CheckpointError
from halfprec.io.safeload import UnsafePickleError, load_weights_only

__all__ = ["save", "load", "read_metadata"]

_FORMAT = "halfprec/1"


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

    report = conversion_report(model)
    meta = {
        "format": _FORMAT,
        "halfprec_version": __version__,
        "torch_version": torch.__version__,
        "dtype": dtype_name(report.dtype) if report else "unconverted",
        "original_dtype": dtype_name(report.original_dtype) if report else "",
        "keep_fp32": json.dumps(report.keep_fp32 if report else []),
    }
    meta.update(metadata or {})
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


def _keep_fp32(meta: dict[str, str], p: Path) -> list[str]:
    """The ``keep_fp32`` metadata entry: a JSON list of module names, checked."""
    try:
        keep = json.loads(meta.get("keep_fp32", "[]"))
    except ValueError as exc:
        raise CheckpointError(
            f"{p}: its keep_fp32 metadata is not valid JSON ({exc}); write the file again "
            "with `halfprec convert`"
        ) from None
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise CheckpointError(
            f"{p}: its keep_fp32 metadata is not a list of module names; write the file "
            "again with `halfprec convert`"
        )
    return keep


def load(
    path: str | os.PathLike[str],
    *,
    into: nn.Module,
    config: ConfigLike = None,
    strict: bool = True,
) -> nn.Module:
    """Load a checkpoint into ``into`` and return it.

    For a halfprec safetensors file, an unconverted ``into`` is first converted in place
    to the file's dtype and fp32 islands, so the result is ready to run. ``config`` (a
    :class:`ConvertConfig`) sets the other conversion options (guards, output casts); its
    dtype, when given, must match the file's.
    """
    p = _existing(path)
    tensors = _read_tensors(p)
    meta = read_metadata(p) if p.suffix == ".safetensors" else {}
    halfprec_file = meta.get("format") == _FORMAT and meta.get("dtype") in ("fp16", "bf16")
    if halfprec_file:
        _check_declared_dtype(meta, tensors, p)
    if halfprec_file and conversion_report(into) is None:
        keep = _keep_fp32(meta, p)
        convert_(into, _file_config(ConvertConfig.of(config), meta["dtype"], keep, p))
    if strict:
        _check_match(into, tensors, p)
    state = into.state_dict()
    with torch.no_grad():
        for name, t in tensors.items():
            if name in state:
                state[name].copy_(t.to(state[name].dtype))
    return into


def _file_config(config: ConvertConfig, dtype: str, keep: list[str], path: Path) -> ConvertConfig:
    """``config`` with the file's dtype and islands (the tensors decide both)."""
    wanted = parse_dtype(dtype)
    asked = config.dtype
    if asked is not None and not is_auto(asked) and parse_dtype(asked) != wanted:
        raise CheckpointError(
            f"{path} holds {dtype} tensors but config asks for {dtype_name(parse_dtype(asked))}; "
            "load it without a dtype, or convert the fp32 model again"
        )
    return config.replace(dtype=wanted, keep_fp32=(*config.keep_fp32, *keep), policy=None)
