from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from halfprec.errors import InputsError
from halfprec.io.inputs import load_inputs, save_inputs


def test_safetensors_keywords_positions_and_batches(tmp_path: Path) -> None:
    save_file({"input_ids": torch.ones(2, 3, dtype=torch.long)}, str(tmp_path / "kw.safetensors"))
    [kw] = load_inputs(tmp_path / "kw.safetensors")
    assert isinstance(kw, dict) and kw["input_ids"].dtype == torch.long

    save_file({"1": torch.zeros(1), "0": torch.ones(1)}, str(tmp_path / "pos.safetensors"))
    [pos] = load_inputs(tmp_path / "pos.safetensors")
    assert isinstance(pos, tuple) and pos[0].item() == 1 and pos[1].item() == 0

    save_inputs([{"x": torch.ones(1)}, {"x": torch.zeros(1)}], tmp_path / "many.safetensors")
    many = load_inputs(tmp_path / "many.safetensors")
    assert [b["x"].item() for b in many] == [1, 0]


def test_torch_file_is_read_weights_only(tmp_path: Path) -> None:
    torch.save([(torch.ones(2),), (torch.zeros(2),)], tmp_path / "b.pt")
    assert len(load_inputs(tmp_path / "b.pt")) == 2


class Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned",))


def test_pickle_carrying_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"x": Evil()}))
    with pytest.raises(InputsError, match="refusing to unpickle"):
        load_inputs(path)


def test_corrupt_missing_and_unknown_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(InputsError, match="not a valid safetensors file"):
        load_inputs(bad)
    with pytest.raises(InputsError, match="not found"):
        load_inputs(tmp_path / "nope.safetensors")
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(InputsError, match=r"is text \(CSV\); give a .safetensors file"):
        load_inputs(tmp_path / "x.csv")


def test_a_torch_or_safetensors_suffix_in_capitals_is_read(tmp_path: Path) -> None:
    torch.save({"x": torch.ones(2)}, tmp_path / "B.PT")
    save_file({"x": torch.ones(2)}, str(tmp_path / "B.SafeTensors"))
    assert len(load_inputs(tmp_path / "B.PT")) == len(load_inputs(tmp_path / "B.SafeTensors")) == 1
