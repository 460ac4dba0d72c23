"""The sentence-transformers layout (:mod:`halfprec.io.sentence_layout`): which layouts a
half folder can hold faithfully, read from modules.json alone. The conversion itself is
tested through the CLI in tests/cli/test_convert.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import BertModel

from halfprec.io.sentence_layout import copy_module_folders, layout_problem
from halfprec.io.specs import load_model
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


def _with_pooling(folder: Path, pooling: dict[str, object], normalize: bool) -> Path:
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if not normalize:
        (folder / "modules.json").write_text(json.dumps(MODULES[:2]))
    return folder


@pytest.mark.parametrize(
    ("mode", "normalize"),
    [("cls", False), ("max", True), ("mean_sqrt_len", False), ("mean", True)],
)
def test_the_folders_pooling_and_normalize_make_its_sentence_embedding(
    tmp_path: Path, mode: str, normalize: bool
) -> None:
    """What sentence-transformers computes from modules.json and 1_Pooling/config.json,
    written out by hand on the transformer's token states."""
    key = "pooling_mode_cls_token" if mode == "cls" else f"pooling_mode_{mode}_tokens"
    folder = _with_pooling(sentence_folder(tmp_path / "st"), {key: True}, normalize)
    loaded = load_model(str(folder))
    batch = loaded.example_inputs[0]
    with torch.no_grad():
        got = loaded.model(**batch)["sentence_embedding"]
        states = BertModel.from_pretrained(folder).eval()(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    want = {
        "cls": states[:, 0],
        "max": states.masked_fill(mask == 0, -1e9).max(1).values,
        "mean": (states * mask).sum(1) / mask.sum(1),
        "mean_sqrt_len": (states * mask).sum(1) / mask.sum(1).sqrt(),
    }[mode]
    if normalize:
        want = torch.nn.functional.normalize(want, dim=-1)
    torch.testing.assert_close(got, want)
    assert not loaded.notes


def test_a_head_halfprec_does_not_run_is_a_note_and_the_transformers_own_outputs(
    tmp_path: Path,
) -> None:
    pooling = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}
    loaded = load_model(str(_with_pooling(sentence_folder(tmp_path / "st"), pooling, True)))
    assert isinstance(loaded.model, BertModel)
    assert "pooling modes (mean, cls) are not one of" in " ".join(loaded.notes)
