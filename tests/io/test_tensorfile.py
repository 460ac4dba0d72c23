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
from support.special_files import fifo, within, zero_link

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


def _sharded(folder: Path, index: Any) -> Path:
    save_file({"a": torch.zeros(2), "a2": torch.zeros(1)}, str(folder / "one.safetensors"))
    save_file({"b": torch.ones(3)}, str(folder / "two.safetensors"))
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


@pytest.mark.parametrize("weight_map", [["a", "b"], 7, None, "one.safetensors"])
def test_an_index_whose_weight_map_is_no_mapping_is_a_checkpoint_error(
    tmp_path: Path, weight_map: Any
) -> None:
    _sharded(tmp_path, {"weight_map": weight_map})  # used to be an AttributeError
    with pytest.raises(CheckpointError, match="its weight_map must map tensor names to shard"):
        TensorFile(tmp_path)


def test_an_index_that_is_a_list_is_a_checkpoint_error(tmp_path: Path) -> None:
    _sharded(tmp_path, [])
    with pytest.raises(CheckpointError, match="is not a safetensors index"):
        TensorFile(tmp_path)


@pytest.mark.parametrize(
    ("weight_map", "needle"),
    [
        (
            {"a": "one.safetensors", "b": "two.safetensors"},
            "tensor 'a2' in one.safetensors is not in its weight_map",
        ),
        (
            {"a": "two.safetensors", "a2": "one.safetensors", "b": "two.safetensors"},
            "puts tensor 'a' in two.safetensors, but one.safetensors holds it",
        ),
        (
            {
                "a": "one.safetensors",
                "a2": "one.safetensors",
                "b": "two.safetensors",
                "c": "one.safetensors",
            },
            "names tensor 'c' in one.safetensors, which does not hold it",
        ),
        ({"a": "../one.safetensors", "b": "two.safetensors"}, "shard file names in its folder"),
    ],
)
def test_an_index_that_disagrees_with_its_shards_is_refused(
    tmp_path: Path, weight_map: dict[str, str], needle: str
) -> None:
    _sharded(tmp_path, {"weight_map": weight_map})
    with pytest.raises(CheckpointError, match="safetensors index|weight_map") as info:
        TensorFile(tmp_path)
    assert needle in str(info.value)


def test_a_fifo_shard_is_refused_without_blocking(tmp_path: Path) -> None:
    _sharded(tmp_path, {"weight_map": {"a": "one.safetensors", "b": "pipe.safetensors"}})
    pipe = fifo(tmp_path / "pipe.safetensors")  # used to block forever in open()
    with pytest.raises(CheckpointError, match=r"is a FIFO \(named pipe\), not a regular file"):
        within(5, lambda: TensorFile(tmp_path), pipe)


def test_a_checkpoint_that_is_a_fifo_or_dev_zero_is_named(tmp_path: Path) -> None:
    pipe = fifo(tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match=r"checkpoint .*m.safetensors is a FIFO"):
        within(5, lambda: TensorFile(pipe), pipe)
    zero = zero_link(tmp_path / "z.safetensors")
    with pytest.raises(CheckpointError, match="is a character device"):
        within(5, lambda: TensorFile(zero))
