"""Training checkpoints for exact resume: one safetensors file, written atomically.

Model weights, optimizer state, scheduler state, the :class:`MixedPrecision` state (loss
scale, growth tracker, counters, config), RNG states and your own step counters go into a
single ``.safetensors`` file. Tensors are stored as tensors; everything else is JSON in the
file's metadata. Nothing is unpickled on load, so loading an untrusted file runs no code.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import save as to_bytes
from torch import nn

from halfprec.atomic import write_bytes_atomic
from halfprec.errors import CheckpointError
from halfprec.io.tensorfile import TensorFile
from halfprec.modules import model_device
from halfprec.readfile import unreadable
from halfprec.train.checkpoint_checks import check_parts
from halfprec.train.config import TrainingStateError
from halfprec.train.mixed import MixedPrecision
from halfprec.train.watch import unwrap

__all__ = ["save_checkpoint", "load_checkpoint", "Resumed", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = "halfprec.train.checkpoint/1"
_META_KEY = "halfprec.train"

Counter = int | float | str


class _Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class Resumed:
    """What :func:`load_checkpoint` restored besides the objects it was given."""

    counters: dict[str, Counter] = field(default_factory=dict)
    parts: tuple[str, ...] = ()


def save_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    mp: MixedPrecision | None = None,
    scheduler: _Stateful | None = None,
    counters: Mapping[str, Counter] | None = None,
) -> Path:
    """Write everything needed to continue training bit-exactly to ``path``.

    ``counters`` holds your loop's positions (epoch, batch index, ...). RNG states of
    Python's ``random``, torch's CPU generator and the current accelerator are included.
    For several models or optimizers, put them in an ``nn.ModuleDict`` / save one file
    each. DataParallel/DDP wrappers are unwrapped, so keys match the plain model.
    """
    parts: dict[str, Any] = {
        "model": mp.model_state_dict(model) if mp is not None else unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": _rng_state(),
    }
    if mp is not None:
        parts["mixed_precision"] = mp.state_dict()
    if scheduler is not None:
        parts["scheduler"] = scheduler.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(parts, "", tensors)
    meta = {"format": CHECKPOINT_FORMAT, "tree": tree, "counters": dict(counters or {})}
    dest = Path(path)
    write_bytes_atomic(dest, to_bytes(tensors, metadata={_META_KEY: json.dumps(meta)}))
    return dest


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    mp: MixedPrecision | None = None,
    scheduler: _Stateful | None = None,
    restore_rng: bool = True,
) -> Resumed:
    """Restore what :func:`save_checkpoint` wrote into fresh objects built the same way.

    Raises :class:`CheckpointError` when the file is not a halfprec training checkpoint,
    when a part you pass was not saved (or the other way round), or when any saved part
    does not fit; the whole file is checked before anything is loaded, so on an error the
    model, optimizer, scheduler and ``mp`` are unchanged.
    """
    tensors, meta = _read(Path(path))
    try:
        parts = _decode(meta.get("tree"), tensors)
    except (KeyError, TypeError, ValueError, IndexError, RecursionError):
        parts = None
    if not isinstance(parts, dict):
        raise CheckpointError(
            f"{path}: its state tree is malformed; the file is damaged or was not written by "
            "halfprec.train.save_checkpoint, so nothing was loaded"
        )
    _check_parts(path, parts, mp=mp is not None, scheduler=scheduler is not None)
    scaling = mp is not None and mp.scaling
    check_parts(path, parts, model, optimizer, meta.get("counters"), loss_scaling=scaling)
    if mp is not None:  # checks its dtype and config before it changes anything
        try:
            mp.load_state_dict(parts["mixed_precision"])
        except TrainingStateError as exc:  # another run's dtype or config: this file's fault
            raise CheckpointError(f"{path}: {exc}") from None
    weights = _to(parts["model"], model_device(model))
    if mp is not None:  # in master-weight mode, into the fp32 masters too
        mp.load_model_state_dict(model, weights)
    else:
        unwrap(model).load_state_dict(weights)
    optimizer.load_state_dict(parts["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(parts["scheduler"])
    if restore_rng:
        _set_rng_state(parts["rng"])
    return Resumed(counters=dict(meta["counters"]), parts=tuple(sorted(parts)))


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    kind = unreadable(path)
    if kind == "not found":
        raise CheckpointError(f"{path}: no such checkpoint file; check the path")
    if kind is not None:
        raise CheckpointError(f"{path}: it is {kind}, not a checkpoint file; check the path")
    try:
        source = TensorFile(path)  # opened as a regular file; every header field checked
        tensors = dict(source.items())
        meta = json.loads(source.metadata.get(_META_KEY, "null"))
    except (CheckpointError, ValueError, RecursionError) as exc:
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({exc}); it may be truncated or not a "
            "checkpoint"
        ) from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path}: not a halfprec training checkpoint (no {CHECKPOINT_FORMAT} metadata); "
            "write it with halfprec.train.save_checkpoint"
        )
    return tensors, meta


def _check_parts(path: str | os.PathLike[str], parts: dict[str, Any], **given: bool) -> None:
    names = {"mp": "mixed_precision", "scheduler": "scheduler"}
    for arg, part in names.items():
        if given[arg] and part not in parts:
            raise CheckpointError(
                f"{path} has no {part} state, but {arg}= was passed; "
                f"load without {arg}=, or save it with save_checkpoint(..., {arg}=...)"
            )
        if part in parts and not given[arg]:
            raise CheckpointError(
                f"{path} holds {part} state, but no {arg}= was passed; pass the "
                f"{arg} to restore, or resume would silently start it fresh"
            )


# -- nested state <-> (JSON tree, flat tensors) ----------------------------------------


def _encode(obj: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        if callable(getattr(obj, "full_tensor", None)):
            raise CheckpointError(
                f"{key!r} is sharded across ranks (a DTensor from FSDP2); save sharded "
                "training state with torch.distributed.checkpoint, or use DDP with "
                "save_checkpoint"
            )
        name = key if key not in tensors else f"{key}#{len(tensors)}"
        tensors[name] = obj.detach().to("cpu", copy=True).contiguous()
        return {"__tensor__": name}
    if isinstance(obj, Mapping):
        return {
            "__dict__": [
                [_encode(k, "", {}), _encode(v, f"{key}.{k}".lstrip("."), tensors)]
                for k, v in obj.items()
            ]
        }
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, f"{key}.{i}", tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, f"{key}.{i}", tensors) for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise CheckpointError(
        f"cannot store {type(obj).__name__} at {key!r} in a checkpoint (only tensors, "
        "numbers, strings, lists and dicts are stored without pickle); keep such values "
        "out of state_dict()"
    )


def _decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__tuple__" in obj:
            return tuple(_decode(v, tensors) for v in obj["__tuple__"])
        return {_decode(k, tensors): _decode(v, tensors) for k, v in obj["__dict__"]}
    return obj


def _to(state: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in state.items()}


# -- RNG -------------------------------------------------------------------------------


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is not None:
        module = torch.get_device_module(accelerator)
        state["accelerator"] = {"type": accelerator.type, "states": module.get_rng_state_all()}
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    saved = state.get("accelerator")
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if saved is not None and accelerator is not None and accelerator.type == saved["type"]:
        module = torch.get_device_module(accelerator)
        # checked on scratch generators first; the devices this machine has
        module.set_rng_state_all(saved["states"][: module.device_count()])
