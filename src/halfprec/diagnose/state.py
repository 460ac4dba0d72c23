"""State a module call is handed and changes: objects other than tensors and containers
that hold tensors, such as a transformers ``Cache`` (a decoder's attention appends its keys
and values to it; a cross-attention stores the encoder's and marks them computed).

The diagnosis runs each module again, alone, on what its fp32 call was handed. By then the
fp32 call has changed such an object, so the run again would read the keys it appended
(or the fp32 ones it stored) instead of computing them. :func:`keep_state` copies such
objects as the call was handed them, and :func:`fresh_state` gives each run again its own
copy, its floating tensors in the run's dtype.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

_ATOMS = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device)
_DEPTH = 4  # how deep an object's attributes are searched for tensors


def _attributes(obj: Any) -> list[Any] | None:
    """The values an object holds: a container's items, an object's attributes; None for
    an atom, a module (never copied: the model's own) or a tensor."""
    if isinstance(obj, (torch.Tensor, nn.Module, type, *_ATOMS)):
        return None
    if isinstance(obj, Mapping):
        return list(obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    held = getattr(obj, "__dict__", None)
    return list(held.values()) if isinstance(held, dict) else None


def _holds_tensors(obj: Any, depth: int = _DEPTH) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    values = _attributes(obj) if depth > 0 else None
    return values is not None and any(_holds_tensors(v, depth - 1) for v in values)


def _map_state(fn: Callable[[Any], Any], obj: Any) -> Any:
    """``obj`` with ``fn`` applied to each object in it (through plain lists, tuples and
    dicts) that is no tensor or container and holds tensors."""
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_map_state(fn, v) for v in obj)
    if type(obj) is dict:
        return {k: _map_state(fn, v) for k, v in obj.items()}
    if isinstance(obj, (torch.Tensor, Mapping, list, tuple)) or not _holds_tensors(obj):
        return obj
    return fn(obj)


def _copied(obj: Any) -> Any:
    try:
        return copy.deepcopy(obj)
    except Exception:  # an object that cannot be copied is handed on as it is
        return obj


def keep_state(inputs: Any) -> Any:
    """``inputs`` (a call's recorded ``(args, kwargs)``) with each stateful object copied
    as it is now, before the call changes it."""
    return _map_state(_copied, inputs)


def _cast_in_place(obj: Any, cast: Callable[[torch.Tensor], torch.Tensor], depth: int) -> None:
    if depth == 0 or _attributes(obj) is None:
        return
    items: Any = obj if isinstance(obj, (list, dict)) else getattr(obj, "__dict__", {})
    keys = range(len(items)) if isinstance(items, list) else list(items)
    for key in keys:
        value = items[key]
        if isinstance(value, torch.Tensor):
            items[key] = cast(value)
        else:
            _cast_in_place(value, cast, depth - 1)


def fresh_state(inputs: Any, cast: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``inputs`` with each stateful object copied again for one run, its tensors through
    ``cast`` (the run's dtype), so that no run sees what an earlier one appended."""

    def fresh(obj: Any) -> Any:
        new = _copied(obj)
        if new is not obj:
            _cast_in_place(new, cast, _DEPTH)
        return new

    return _map_state(fresh, inputs)
