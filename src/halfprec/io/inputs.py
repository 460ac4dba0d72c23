"""Read example inputs from a file (``--inputs FILE``) without unpickling code.

- ``.safetensors``: tensor names are keyword arguments (``input_ids``), or positions
  (``0``, ``1``); a ``batchN.`` prefix (``batch0.input_ids``) gives several batches.
- ``.pt`` / ``.pth``: read with ``torch.load(weights_only=True)``; a list is several
  batches, a tuple positional args, a dict keyword args, a tensor the single argument.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from halfprec.batch import Batch, as_batches
from halfprec.errors import CheckpointError, InputsError
from halfprec.io.safeload import UnsafePickleError, load_weights_only
from halfprec.io.tensorfile import TensorFile
from halfprec.modules import first_line
from halfprec.readfile import open_regular, refusal
from halfprec.tree import nesting_depth

__all__ = ["INPUTS_FORMAT", "load_inputs", "save_inputs"]

_BATCH = re.compile(r"^batch(\d+)\.(.+)$")


# what a file of another kind holds, named in its refusal (the suffix alone tells)
_OTHER_KINDS = {
    ".pkl": "a pickle, which halfprec does not load (unpickling can run code)",
    ".pickle": "a pickle, which halfprec does not load (unpickling can run code)",
    ".json": "JSON text",
    ".txt": "text",
    ".csv": "text (CSV)",
    ".tsv": "text (TSV)",
    ".npy": "a NumPy array (torch.from_numpy makes it a tensor)",
    ".npz": "a NumPy archive (torch.from_numpy makes each array a tensor)",
    ".zip": "a zip archive",
    ".onnx": "an ONNX model",
    ".pt2": "an exported program",
}
_TORCH_SUFFIXES = (".pt", ".pth", ".bin")
INPUTS_FORMAT = (
    "a .safetensors file with one tensor per input name (batch0.NAME, batch1.NAME for "
    "several batches; safetensors.torch.save_file) or a .pt file of a dict of tensors "
    "(torch.save)"
)
"""What ``--inputs`` reads, and how to write it: the fix of every refusal of an inputs file."""
_FIX = f"give {INPUTS_FORMAT}"


def load_inputs(path: str | os.PathLike[str]) -> list[Batch]:
    """Read the batches stored in ``path``. A file that is not one halfprec reads is
    :class:`InputsError`, one line naming the path as given, what it is, and the fix."""
    p, given = Path(path), os.fspath(path)
    if p.is_dir():
        raise InputsError(f"inputs file {given} is a folder; {_FIX}")
    problem = refusal("inputs file", given)
    if problem is not None:
        raise InputsError(problem)
    suffix = p.suffix.lower()
    if suffix != ".safetensors" and suffix not in _TORCH_SUFFIXES:
        kind = _OTHER_KINDS.get(suffix) or (f"a {suffix} file" if suffix else "without a suffix")
        raise InputsError(f"inputs file {given} is {kind}; {_FIX}")
    if p.stat().st_size == 0:
        raise InputsError(f"inputs file {given} is empty (0 bytes); {_FIX}")
    return _from_safetensors(p) if suffix == ".safetensors" else _from_torch(p, given)


def _from_safetensors(p: Path) -> list[Batch]:
    try:
        source = TensorFile(p)  # a regular file, every header field checked
        tensors = dict(source.items())
    except CheckpointError as exc:  # "{p} is not a valid safetensors file (...); ..."
        raise InputsError(f"inputs file {exc}; {_FIX}") from None
    grouped: dict[int, dict[str, torch.Tensor]] = defaultdict(dict)
    for key, t in tensors.items():
        m = _BATCH.match(key)
        index, name = (int(m.group(1)), m.group(2)) if m else (0, key)
        grouped[index][name] = t
    return [_as_call(grouped[i]) for i in sorted(grouped)]


def _as_call(named: dict[str, torch.Tensor]) -> Batch:
    if all(k.isdigit() for k in named):
        return tuple(named[k] for k in sorted(named, key=int))
    if any(k.isdigit() for k in named):
        raise InputsError(
            "inputs mix positional (0, 1, ...) and keyword names in one batch; use one kind"
        )
    return dict(named)


def _from_torch(p: Path, given: str) -> list[Batch]:
    try:
        with open_regular(p) as f:
            obj: Any = load_weights_only(f)
    except UnsafePickleError as exc:
        raise InputsError(
            f"refusing to unpickle inputs file {given}: {exc.detail}; {_FIX}"
        ) from None
    except (RuntimeError, EOFError, OSError) as exc:
        raise InputsError(
            f"inputs file {given} is corrupt or not a torch file ({first_line(exc)}); {_FIX}"
        ) from None
    if (
        nesting_depth(obj, _MAX_DEPTH) > _MAX_DEPTH
    ):  # every later walk over the inputs would recurse that deep
        raise InputsError(
            f"inputs file {given} nests lists, tuples or dicts more than {_MAX_DEPTH} deep; give "
            "tensors, or a list of batches of tensors"
        )
    try:
        return as_batches(obj)
    except ValueError as exc:
        raise InputsError(f"inputs file {given}: {exc}") from None


_MAX_DEPTH = 32


def save_inputs(batches: list[Batch], path: str | os.PathLike[str]) -> None:
    """Write tensor-only batches to a safetensors file that :func:`load_inputs` reads."""
    from safetensors.torch import save as to_bytes

    from halfprec.atomic import write_bytes_atomic

    flat: dict[str, torch.Tensor] = {}
    for i, batch in enumerate(batches):
        items = batch.items() if isinstance(batch, dict) else enumerate(as_tuple(batch))
        for name, t in items:
            if not isinstance(t, torch.Tensor):
                raise InputsError(f"batch {i} argument {name!r} is not a tensor; cannot save it")
            flat[f"batch{i}.{name}"] = t.contiguous()
    write_bytes_atomic(path, to_bytes(flat))


def as_tuple(batch: Batch) -> tuple[Any, ...]:
    return batch if isinstance(batch, tuple) else (batch,)
