"""convert HF_DIR -o OUTDIR: a directory plain transformers loads, with the recipe inside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import halfprec
from halfprec.io.hf_dir import RECIPE_FILE
from support.cli import run_cli
from support.hf_models import build, save


@pytest.mark.parametrize(
    ("name", "shard"), [("llama", "5GB"), ("gpt2", "10KB"), ("t5", "5GB")], ids=str
)
def test_convert_a_hf_directory_to_a_directory_transformers_loads(
    tmp_path: Path, name: str, shard: str
) -> None:
    source = save(name, tmp_path)
    out = tmp_path / "out"
    proc = run_cli(
        "convert", str(source), "--dtype", "bf16", "-o", str(out), "--max-shard-size", shard,
        "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["transformers_check"]["passed"], data["transformers_check"]
    files = set(data["files"])
    assert {"config.json", RECIPE_FILE} <= files and not any(f.endswith(".py") for f in files)
    if shard == "10KB":
        assert "model.safetensors.index.json" in files  # sharded like save_pretrained
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    # halfprec restores the exact model, islands included, with no config
    model = build(name)
    loaded = halfprec.load(out, into=lambda: build(name))
    recipe = halfprec.Recipe.load(out / RECIPE_FILE)
    assert halfprec.recipe_of(loaded) == recipe
    expected = halfprec.convert(model, recipe)
    for (k, a), (_, b) in zip(
        loaded.state_dict().items(), expected.state_dict().items(), strict=True
    ):
        assert a.dtype == b.dtype and torch.equal(a, b), k
    islands = data["transformers_keeps_fp32"]
    assert set(islands) == {k for k in recipe.keep_fp32 if k}


def test_a_folder_output_needs_a_hf_directory_and_a_new_folder(tmp_path: Path) -> None:
    proc = run_cli("convert", "builtin:cnn", "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and "must end in .safetensors" in proc.stderr
    source = save("gpt2", tmp_path)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    proc = run_cli("convert", str(source), "-o", str(busy))
    assert proc.returncode == 2 and "not an empty folder" in proc.stderr
    assert (busy / "keep.txt").read_text() == "mine" and len(list(busy.iterdir())) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".halfprec-")]
