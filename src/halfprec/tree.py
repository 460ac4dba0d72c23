"""Walk nested inputs and outputs: tensors inside dicts, lists, tuples, namedtuples,
dataclasses and Hugging Face ``ModelOutput`` objects.

``map_tensors`` rebuilds the same structure with each tensor replaced; ``flatten`` lists
``(path, tensor)`` pairs with dotted paths such as ``last_hidden_state`` or ``hidden_states.3``.

Paths are unique: a mapping key that is not a plain string (not a ``str``, empty, holding
a ``.`` or starting with ``[``) is written as its ``repr`` in brackets, so ``{"a.b": x}``
gives ``['a.b']`` (not ``a.b``, the path of ``{"a": {"b": y}}``) and ``{0: x}`` gives
``[0]`` (not ``0``, the path of ``{"0": y}``). ``flatten`` raises ``ValueError`` if two
tensors would still share a path.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

__all__ = ["map_tensors", "flatten", "iter_tensors", "unflatten", "nesting_depth", "ROOT"]

ROOT = "output"

TensorFn = Callable[[torch.Tensor], torch.Tensor]


def _is_namedtuple(obj: object) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def map_tensors(fn: TensorFn, obj: Any) -> Any:
    """Return ``obj`` rebuilt with ``fn`` applied to every tensor; other leaves are kept.

    Containers keep their types (``OrderedDict``, namedtuples, dataclasses, ``ModelOutput``).
    Objects that are none of these are returned unchanged, by identity.
    """
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        return _map_mapping(fn, obj)
    if _is_namedtuple(obj):
        return type(obj)(*(map_tensors(fn, v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(fn, v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        new = copy.copy(obj)
        for field in dataclasses.fields(obj):
            object.__setattr__(new, field.name, map_tensors(fn, getattr(obj, field.name)))
        return new
    return obj


def _map_mapping(fn: TensorFn, obj: Mapping[Any, Any]) -> Any:
    items = {k: map_tensors(fn, v) for k, v in obj.items()}
    if type(obj) is dict:
        return items
    if dataclasses.is_dataclass(obj):
        # transformers' ModelOutput: a dataclass and an OrderedDict whose keys are the
        # non-None fields; rebuilding through the constructor keeps both views in sync.
        return type(obj)(**items)
    try:
        new = copy.copy(obj)
        for k, v in items.items():
            new[k] = v  # type: ignore[index]
        return new
    except TypeError:
        return items


def iter_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(path, tensor)`` for every tensor in ``obj``, depth first, in order."""
    if isinstance(obj, torch.Tensor):
        yield (prefix or ROOT), obj
        return
    children: Iterator[tuple[str, Any]]
    if isinstance(obj, Mapping):
        children = ((_key(k), v) for k, v in obj.items())
    elif _is_namedtuple(obj):
        children = zip(type(obj)._fields, obj, strict=True)
    elif isinstance(obj, (list, tuple)):
        children = ((str(i), v) for i, v in enumerate(obj))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        children = ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
    else:
        return
    for key, value in children:
        joined = f"{prefix}{key}" if key.startswith("[") else f"{prefix}.{key}"
        yield from iter_tensors(value, joined if prefix else key)


def _key(key: object) -> str:
    """A mapping key as a path segment that no other key of any type can produce."""
    if isinstance(key, str) and key and "." not in key and not key.startswith("["):
        return key
    return f"[{key!r}]"


def unflatten(named: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """Nested dicts from dotted paths (``{"a.0.b": t}`` -> ``{"a": {"0": {"b": t}}}``),
    so that :func:`flatten` gives the same paths back: the inverse for files whose outputs
    are named by path (ONNX). A name holding a bracketed key stays one key."""
    out: dict[str, Any] = {}
    for name, tensor in named.items():
        parts = [name] if "[" in name else name.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = tensor
    return out


def flatten(obj: Any) -> dict[str, torch.Tensor]:
    """All tensors in ``obj`` keyed by dotted path (a bare tensor is keyed ``"output"``).

    Raises ``ValueError`` when two tensors share a path, so none is silently dropped."""
    out: dict[str, torch.Tensor] = {}
    for path, tensor in iter_tensors(obj):
        if path in out:
            raise ValueError(
                f"two tensors in the outputs share the path {path!r}, so one would go "
                "uncompared; give the mapping keys distinct names"
            )
        out[path] = tensor
    return out


def nesting_depth(obj: Any, limit: int) -> int:
    """How deep ``obj``'s lists, tuples and dicts nest (``[]`` is 1, a scalar 0), found
    without recursing and counted up to just past ``limit``: the check to make before
    anything walks a structure read from a file recursively."""
    deepest, stack = 0, [(obj, 0)]
    while stack and deepest <= limit:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple)):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, dict):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in item.values())
    return deepest
