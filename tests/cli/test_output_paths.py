"""``-o`` (and ``--plot``) never names an input: a path that is, or is inside, any input
file or folder (links resolved), or a folder output that holds one, is refused before any
work, with exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from halfprec import Recipe
from support import SUPPORT

TINY = f"{SUPPORT / 'export_models.py'}:tiny"


@pytest.fixture
def hf_dir(tmp_path: Path) -> Path:
    pytest.importorskip("transformers")
    from support.hf_models import save

    return save("gpt2", tmp_path / "models")


def _refused(proc, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_convert_into_the_model_folder_is_refused(cli, hf_dir: Path) -> None:  # type: ignore[no-untyped-def]
    before = _snapshot(hf_dir)
    proc = cli("convert", str(hf_dir), "-o", str(hf_dir / "model.safetensors"))
    _refused(proc, "is inside the MODEL folder", "write it to another path")
    assert _snapshot(hf_dir) == before


def test_a_folder_output_that_holds_the_model_is_refused(cli, hf_dir: Path) -> None:  # type: ignore[no-untyped-def]
    before = _snapshot(hf_dir)
    _refused(cli("convert", str(hf_dir), "-o", str(hf_dir.parent)), "holds the MODEL folder")
    assert _snapshot(hf_dir) == before


def test_convert_onto_a_shard_of_the_weights_folder_is_refused(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shards = tmp_path / "ckpt"
    shards.mkdir()
    (shards / "shard-1.safetensors").write_bytes(b"the user's shard")
    out = shards / "shard-1.safetensors"
    proc = cli("convert", TINY, "--weights", str(shards), "-o", str(out))
    _refused(proc, "is inside the --weights folder")
    assert out.read_bytes() == b"the user's shard"


def test_a_link_to_the_input_folder_is_resolved(cli, hf_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    link = tmp_path / "alias"
    link.symlink_to(hf_dir)
    proc = cli("export", str(hf_dir), "-o", str(link / "m.pt2"))
    _refused(proc, "is inside the MODEL folder")
    assert not (hf_dir / "m.pt2").exists()


def test_the_recipe_and_the_model_file_are_inputs_too(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recipe = tmp_path / "r.json"
    Recipe(dtype="fp16").save(recipe)
    text = recipe.read_text()
    proc = cli("tune", TINY, "--recipe", str(recipe), "-o", str(recipe))
    _refused(proc, "is the --recipe file")
    assert recipe.read_text() == text
    model = tmp_path / "m.py"
    model.write_text((SUPPORT / "export_models.py").read_text())
    link = tmp_path / "m.ts"
    link.symlink_to(model)
    _refused(cli("export", f"{model}:tiny", "-o", str(link)), "is the MODEL file")


def test_an_output_that_is_a_link_loop_is_exit_2(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    loop = tmp_path / "loop.safetensors"
    os.symlink(loop.name, loop)  # a link to itself
    _refused(cli("convert", TINY, "-o", str(loop)), "symbolic link loop")
    other = tmp_path / "a.pt2"
    os.symlink("b.pt2", other)
    os.symlink("a.pt2", tmp_path / "b.pt2")
    _refused(cli("export", TINY, "-o", str(other)), "symbolic link loop")
