"""The sentence-transformers layout (:mod:`halfprec.io.sentence_layout`): which layouts a
half folder can hold faithfully, read from modules.json alone. The conversion itself is
tested through the CLI in tests/cli/test_convert.py."""

from __future__ import annotations

from pathlib import Path

from halfprec.io.sentence_layout import copy_module_folders, layout_problem
from support.sentence_folder import MODULES, sentence_folder


def test_unreadable_modules_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text("{not json")
    assert "cannot be read as JSON" in (layout_problem(tmp_path) or "")
    (tmp_path / "modules.json").write_text('{"a": 1}')
    assert "is not a list of modules" in (layout_problem(tmp_path) or "")
    assert layout_problem(tmp_path / "nothing") is None


def test_module_folders_are_copied_and_the_transformer_top_is_not(tmp_path: Path) -> None:
    source = sentence_folder(tmp_path / "st")
    assert layout_problem(source) is None
    dest = tmp_path / "out"
    dest.mkdir()
    assert copy_module_folders(source, dest) == [m["path"] for m in MODULES[1:]]
    assert sorted(p.name for p in dest.iterdir()) == ["1_Pooling", "2_Normalize"]
