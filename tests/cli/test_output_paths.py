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


# -- an -o that cannot be written is refused before the model loads ------------------------
# MODEL raises when built, so a refusal that names the output came before any work.


@pytest.fixture
def unbuildable(tmp_path: Path) -> str:
    source = tmp_path / "unbuilt.py"
    source.write_text("def build():\n    raise RuntimeError('the model was built')\n")
    return f"{source}:build"


@pytest.mark.parametrize(
    "output, why",
    [
        ("plain/x.safetensors", "plain is not a folder; give a path inside a folder"),
        ("busy", "busy exists and is not an empty folder; pick a new path"),
        ("adir.safetensors", "adir.safetensors is a directory; give a file path"),
        ("plain/x.xml", "plain is not a folder"),
    ],
)
def test_deploy_refuses_an_output_it_cannot_write_before_the_model_loads(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path, unbuildable: str, output: str, why: str
) -> None:
    (tmp_path / "plain").write_text("")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    (tmp_path / "adir.safetensors").mkdir()
    proc = cli("deploy", unbuildable, "--no-compile", "-o", str(tmp_path / output))
    _refused(proc, why)
    assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"


def test_convert_refuses_a_folder_output_it_cannot_write_before_the_model_loads(  # type: ignore[no-untyped-def]
    cli, hf_dir: Path, tmp_path: Path
) -> None:
    (hf_dir / "model.safetensors").write_bytes(b"not weights")  # loading it would fail
    (tmp_path / "plain").write_text("")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    _refused(cli("convert", str(hf_dir), "-o", str(tmp_path / "busy")), "not an empty folder")
    _refused(cli("convert", str(hf_dir), "-o", str(tmp_path / "plain" / "out")), "not a folder")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".halfprec-")]


def test_a_read_only_folder_is_refused_before_the_model_loads(  # type: ignore[no-untyped-def]
    cli, tiny_fs: Path, unbuildable: str
) -> None:
    import subprocess

    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    for command in ("convert", "deploy"):
        out = tiny_fs / "new" / "x.safetensors"
        _refused(cli(command, unbuildable, "-o", str(out)), f"cannot use {out}", "read-only")
