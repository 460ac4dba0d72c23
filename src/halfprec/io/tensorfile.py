"""safetensors files read and written one tensor at a time, with plain file I/O.

safetensors' own ``safe_open`` maps the whole file into memory; every page a read touches
then counts in the process's resident memory until the file is closed, so reading a 2 GB
checkpoint tensor by tensor still grows RSS by 2 GB. :class:`TensorFile` parses the header
itself (8-byte little-endian length, JSON) and reads each tensor with ``readinto`` into a
tensor it owns: memory is the tensor and nothing else. :meth:`TensorFile.mapped` is the
other way, for a loader that keeps every tensor as it is in the file: a copy-on-write view
of the file's pages (as ``from_pretrained`` loads), read when first used, never copied
unless written to. It also reads sharded checkpoints
(``model.safetensors.index.json`` with its ``weight_map``). :class:`TensorWriter` writes
the header first (shapes and dtypes are known up front) and then each tensor's bytes in
turn, so the output is never whole in memory either. Files it writes load with
``safetensors.safe_open``.

Every dtype safetensors stores and torch has is read and written, complex64 (``C64``)
included; complex128 has no safetensors code, so it is refused with the fix. Every header
field is checked before use: each entry is an object with a known ``dtype``, a ``shape`` of
sizes >= 0 and ``data_offsets`` ``[begin, end]`` inside the file whose length fits the shape
and dtype; ``__metadata__`` maps strings to strings. A crafted or corrupt header is one
:class:`~halfprec.errors.CheckpointError`.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import torch

from halfprec.errors import CheckpointError
from halfprec.readfile import NotAFileError, open_regular, read_regular, refusal

INDEX_NAME = "model.safetensors.index.json"

_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "C64": torch.complex64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
    "U16": torch.uint16,
    "U32": torch.uint32,
    "U64": torch.uint64,
}
_NAMES = {v: k for k, v in _DTYPES.items()}
_HEADER_LIMIT = 100 * 2**20
_INDEX_LIMIT = 100 * 2**20
_INT64_MAX = 2**63 - 1


def _header(path: Path) -> tuple[int, dict[str, Any]]:
    """(byte offset of the data, parsed and checked header) of one safetensors file."""
    try:
        with open_regular(path) as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > _HEADER_LIMIT:
                raise ValueError(f"header of {size} bytes")
            header = json.loads(f.read(size))
            data_size = os.fstat(f.fileno()).st_size - 8 - size
        if not isinstance(header, dict):
            raise ValueError(f"the header is a JSON {type(header).__name__}, not an object")
        for name, info in header.items():
            problem = _meta_problem(info) if name == "__metadata__" else _entry_problem(info)
            if problem:
                raise ValueError(f"header entry {name[:80]!r} {problem}")
            if name != "__metadata__" and info["data_offsets"][1] > data_size:
                raise ValueError(f"tensor {name[:80]!r} ends past the end of the file")
    except NotAFileError as exc:
        raise CheckpointError(
            f"checkpoint {path} is {exc.kind}, not a regular file; give a file"
        ) from None
    except (OSError, ValueError, struct.error) as exc:
        raise CheckpointError(
            f"{path} is not a valid safetensors file ({exc}); it may be truncated or "
            "corrupt: copy or write it again"
        ) from None
    return 8 + size, header


def _meta_problem(meta: Any) -> str | None:
    if meta is None:
        return None
    if isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values()):
        return None
    return "must map strings to strings"


def _is_size(v: Any) -> bool:
    """An int64 size: torch cannot make a tensor with a dimension past 2**63 - 1."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _INT64_MAX


def _entry_problem(info: Any) -> str | None:
    """Why a tensor's header entry cannot be used, or None."""
    if not isinstance(info, dict):
        return "is not an object"
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        return f"has dtype {str(dtype)[:20]!r}, not one of {', '.join(_DTYPES)}"
    if not isinstance(shape, list) or not all(_is_size(d) for d in shape):
        return f"has shape {str(shape)[:40]}, not a list of sizes from 0 to 2**63 - 1"
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_size(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        return f"has data_offsets {str(offsets)[:40]}, not [begin, end] with 0 <= begin <= end"
    want = math.prod(shape) * torch.empty((), dtype=_DTYPES[dtype]).element_size()
    if offsets[1] - offsets[0] != want:
        return f"has {offsets[1] - offsets[0]} bytes for shape {shape} of {dtype} ({want})"
    return None


def _weight_map(index: Path) -> dict[str, str]:
    """The ``weight_map`` of a sharded checkpoint's index: tensor name -> shard file name,
    each shard a plain file name in the index's folder."""
    try:
        data = json.loads(read_regular(index, limit=_INDEX_LIMIT))
    except (OSError, ValueError, RecursionError) as exc:
        raise CheckpointError(
            f"{index} is not a safetensors index ({exc}); write the checkpoint again"
        ) from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v not in ("", ".", "..") and Path(v).name == v
        for k, v in weight_map.items()
    ):
        raise CheckpointError(
            f"{index} is not a safetensors index: its weight_map must map tensor names to "
            "shard file names in its folder; write the checkpoint again"
        )
    return weight_map


def _check_weight_map(index: Path, weight_map: dict[str, str], found: dict[str, str]) -> None:
    """The index names every tensor the shards hold, each in the shard that holds it."""
    for name, shard in weight_map.items():
        if name not in found:
            raise CheckpointError(
                f"{index}: its weight_map names tensor {name[:80]!r} in {shard}, which does not "
                "hold it; the index was altered: write the checkpoint again"
            )
        if found[name] != shard:
            raise CheckpointError(
                f"{index}: its weight_map puts tensor {name[:80]!r} in {shard}, but "
                f"{found[name]} holds it; the index was altered: write the checkpoint again"
            )
    extra = [n for n in found if n not in weight_map]
    if extra:
        raise CheckpointError(
            f"{index}: tensor {extra[0][:80]!r} in {found[extra[0]]} is not in its weight_map; "
            "the index was altered: write the checkpoint again"
        )


class TensorFile:
    """One safetensors file, or a sharded checkpoint (a directory holding
    ``model.safetensors.index.json``, or that index file itself)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        p = Path(path)
        if p.is_dir():
            index = p / INDEX_NAME
            single = p / "model.safetensors"
            p = index if os.path.lexists(index) else single
        problem = refusal("checkpoint", p)
        if problem is not None:
            raise CheckpointError(problem)
        self.path = p
        self.metadata: dict[str, str] = {}
        self._where: dict[str, tuple[Path, int, dict[str, Any]]] = {}
        self._maps: dict[Path, mmap.mmap] = {}
        weight_map = _weight_map(p) if p.name.endswith(".index.json") else None
        shards = (
            [p]
            if weight_map is None
            else [p.parent / s for s in dict.fromkeys(weight_map.values())]
        )
        for shard in shards:
            start, header = _header(shard)
            meta = header.pop("__metadata__", None) or {}
            self.metadata.update(meta)
            for name, info in header.items():
                if name in self._where:
                    raise CheckpointError(
                        f"{p}: tensor {name[:80]!r} is in both {self._where[name][0].name} and "
                        f"{shard.name}; write the checkpoint again"
                    )
                self._where[name] = (shard, start, info)
        if weight_map is not None:
            _check_weight_map(p, weight_map, {n: w[0].name for n, w in self._where.items()})

    def names(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self._where[name][2]["shape"])

    def dtype(self, name: str) -> torch.dtype:
        return _DTYPES[self._where[name][2]["dtype"]]  # checked when the header was read

    def nbytes(self) -> int:
        return sum(
            end - begin for _, _, i in self._where.values() for begin, end in [i["data_offsets"]]
        )

    def get(self, name: str) -> torch.Tensor:
        """Read one tensor into memory of its own (nothing stays mapped)."""
        shard, start, info = self._where[name]
        begin, end = (int(x) for x in info["data_offsets"])
        dtype, shape = self.dtype(name), self.shape(name)
        size = end - begin  # fits shape and dtype: checked when the header was read
        raw = torch.empty(size, dtype=torch.uint8)
        with open_regular(shard) as f:
            f.seek(start + begin)
            if size and f.readinto(raw.numpy().data) != size:
                raise CheckpointError(f"{shard} is truncated inside tensor {name!r}")
        return raw.view(dtype).reshape(shape)

    def mapped(self, name: str) -> torch.Tensor:
        """One tensor as a private, writable view of the file's pages (``mmap``, copy on
        write): nothing is read until the tensor is used, and then only from the page
        cache, with no copy. The mapping lives as long as any tensor viewing it. Writes to
        the tensor stay in this process; a file replaced by rename (as halfprec writes)
        leaves it intact, but one truncated in place makes reading the tensor fail. A
        tensor whose bytes are not aligned to its element size is read with :meth:`get`."""
        shard, start, info = self._where[name]
        begin, end = (int(x) for x in info["data_offsets"])
        dtype, shape = self.dtype(name), self.shape(name)
        itemsize = torch.empty((), dtype=dtype).element_size()
        count = math.prod(shape)
        if end - begin != count * itemsize:
            raise CheckpointError(
                f"{shard}: tensor {name!r} has {end - begin} bytes for shape {shape}"
            )
        if count == 0 or (start + begin) % itemsize:
            return self.get(name)
        if shard not in self._maps:
            with open_regular(shard) as f:
                self._maps[shard] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        buffer = self._maps[shard]
        if start + end > len(buffer):
            raise CheckpointError(f"{shard} is truncated inside tensor {name!r}")
        flat = torch.frombuffer(buffer, dtype=dtype, count=count, offset=start + begin)
        return flat.reshape(shape)

    def items(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Each tensor in file order, one in memory at a time (when the caller lets go)."""
        for name in self.names():
            yield name, self.get(name)


class TensorWriter:
    """Writes a safetensors file whose tensors' names, dtypes and shapes are known up front;
    :meth:`write` then takes the tensors in that order, one at a time."""

    def __init__(
        self,
        f: IO[bytes],
        specs: dict[str, tuple[torch.dtype, tuple[int, ...]]],
        metadata: dict[str, str] | None = None,
    ) -> None:
        header: dict[str, Any] = {}
        offset = 0
        for name, (dtype, shape) in specs.items():
            if dtype not in _NAMES:
                raise CheckpointError(
                    f"tensor {name!r} is {dtype}, which safetensors cannot store; convert it "
                    f"first (complex128 -> complex64; one of {', '.join(map(str, _NAMES))})"
                )
            size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            header[name] = {
                "dtype": _NAMES[dtype],
                "shape": list(shape),
                "data_offsets": [offset, offset + size],
            }
            offset += size
        if metadata:
            header["__metadata__"] = dict(metadata)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        self.f = f
        self.pending = list(specs.items())

    def write(self, name: str, tensor: torch.Tensor) -> None:
        if not self.pending:
            raise ValueError(f"tensor {name!r} is one more than the header announced")
        expected, (dtype, shape) = self.pending[0]
        if name != expected or tensor.dtype != dtype or tuple(tensor.shape) != shape:
            raise ValueError(
                f"tensor {name!r} {tensor.dtype} {tuple(tensor.shape)} does not match the "
                f"header's next entry {expected!r} {dtype} {shape}"
            )
        self.pending.pop(0)
        # resolve_conj: a conjugate view's memory holds the unconjugated values
        flat = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous().reshape(-1)
        if flat.numel():
            self.f.write(flat.view(torch.uint8).numpy().data)

    def close(self) -> None:
        if self.pending:
            raise ValueError(f"{len(self.pending)} tensors announced but not written")
