"""The streaming safetensors reader/writer: every dtype safetensors stores round-trips
against ``safetensors.torch``, and a crafted header is one CheckpointError."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from halfprec.errors import CheckpointError
from halfprec.io.tensorfile import TensorFile, TensorWriter

DTYPES = [
    torch.complex64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.bool,
]


def _sample(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype.is_complex:
        return torch.randn(3, 4, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return torch.randn(3, 4, generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.rand(3, 4, generator=g) > 0.5
    return torch.randint(0, 200, (3, 4), generator=g).to(dtype)


def _write(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    specs = {k: (t.dtype, tuple(t.shape)) for k, t in tensors.items()}
    with path.open("wb") as f:
        writer = TensorWriter(f, specs)
        for k, t in tensors.items():
            writer.write(k, t)
        writer.close()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_safetensors_dtype_round_trips_both_ways(tmp_path: Path, dtype: torch.dtype) -> None:
    t = _sample(dtype)
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    _write(ours, {"t": t})
    save_file({"t": t}, str(theirs))
    back = load_file(str(ours))["t"]  # what halfprec writes, read by safetensors
    assert back.dtype == dtype and torch.equal(back.view(torch.uint8), t.view(torch.uint8))
    got = TensorFile(theirs).get("t")
    assert got.dtype == dtype and torch.equal(got.view(torch.uint8), t.view(torch.uint8))


def test_a_conjugate_view_is_written_with_its_values(tmp_path: Path) -> None:
    t = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).conj()
    _write(tmp_path / "c.safetensors", {"c": t})
    assert torch.equal(load_file(str(tmp_path / "c.safetensors"))["c"], t.resolve_conj())


def test_complex128_is_refused_with_the_fix(tmp_path: Path) -> None:
    with (
        (tmp_path / "x.safetensors").open("wb") as f,
        pytest.raises(CheckpointError, match=r"complex128, which safetensors cannot store"),
    ):
        TensorWriter(f, {"z": (torch.complex128, (2,))})


def _crafted(path: Path, header: Any, data: bytes = b"\0" * 64) -> Path:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def _entry(**change: Any) -> dict[str, Any]:
    return {"t": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16], **change}}


@pytest.mark.parametrize(
    ("header", "needle"),
    [
        ([], "the header is a JSON list, not an object"),
        ({"t": "x"}, "header entry 't' is not an object"),
        (_entry(dtype=7), "has dtype '7', not one of"),
        (_entry(dtype="C128"), "has dtype 'C128'"),
        (_entry(shape=[2, -2]), "has shape [2, -2], not a list of sizes from 0 to 2**63 - 1"),
        # int64 overflow: used to pass, then fail in torch's reshape with a TypeError
        (_entry(shape=[0, 2**63], data_offsets=[0, 0]), "has shape [0, 9223372036854775808]"),
        (_entry(shape="2x2"), "has shape 2x2"),
        (_entry(shape=[True, 2]), "has shape [True, 2]"),
        (_entry(data_offsets=[16, 0]), "not [begin, end] with 0 <= begin <= end"),
        (_entry(data_offsets=[0, "16"]), "has data_offsets"),
        (_entry(data_offsets=[0, 12]), "has 12 bytes for shape [2, 2] of F32 (16)"),
        (_entry(shape=[10, 10], data_offsets=[0, 400]), "ends past the end of the file"),
        ({**_entry(), "__metadata__": {"k": 1}}, "'__metadata__' must map strings to strings"),
    ],
)
def test_a_crafted_header_is_one_checkpoint_error(tmp_path: Path, header: Any, needle: str) -> None:
    path = _crafted(tmp_path / "bad.safetensors", header)
    with pytest.raises(CheckpointError, match="is not a valid safetensors file") as info:
        TensorFile(path)
    assert needle in str(info.value)
