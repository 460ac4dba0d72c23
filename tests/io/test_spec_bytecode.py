"""A ``file.py:factory`` MODEL is compiled from its source, read as a regular file: its
bytecode cache (``__pycache__/*.pyc``) is never read or written, so a FIFO or a link to
``/dev/zero`` there cannot hang the load or eat memory."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from halfprec.errors import ModelSpecError
from halfprec.io.specs import load_model
from support.special_files import fifo, within, zero_link

_MODEL = """
import torch
from torch import nn


def build() -> nn.Module:
    return nn.Linear(4, 2)


def example_inputs() -> list[torch.Tensor]:
    return [torch.randn(3, 4)]


def fails() -> nn.Module:
    raise ValueError("line " + "five")
"""


@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
@pytest.mark.parametrize("write_bytecode", [True, False], ids=["default", "dontwritebytecode"])
def test_a_special_bytecode_cache_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, special: str, write_bytecode: bool
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", not write_bytecode)
    model = tmp_path / "m.py"
    model.write_text(_MODEL)
    cached = Path(importlib.util.cache_from_source(str(model)))
    cached.parent.mkdir()
    made = fifo(cached) if special == "fifo" else zero_link(cached)
    loaded = within(20, lambda: load_model(f"{model}:build"), made)
    assert loaded.model.out_features == 2
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]  # nothing written


def test_no_bytecode_cache_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    model = tmp_path / "m.py"
    model.write_text(_MODEL)
    load_model(f"{model}:build")
    assert not (tmp_path / "__pycache__").exists()


def test_a_fifo_model_file_is_refused_at_once(tmp_path: Path) -> None:
    made = fifo(tmp_path / "m.py")
    with pytest.raises(ModelSpecError, match=r"FIFO \(named pipe\)"):
        within(20, lambda: load_model(f"{made}:build"), made)


def test_tracebacks_still_show_the_model_s_source_lines(tmp_path: Path) -> None:
    import traceback

    model = tmp_path / "m.py"
    model.write_text(_MODEL)
    load_model(f"{model}:build")
    module = next(
        m for m in sys.modules.values() if getattr(m, "__file__", None) == str(model.resolve())
    )
    try:
        module.fails()
    except ValueError as exc:
        text = "".join(traceback.format_exception(exc))
    assert 'raise ValueError("line " + "five")' in text
