"""The .pt2 operator allow-list: a graph that reaches files, the process or storage is
refused before torch runs it, and halfprec's own exports are never refused."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

import halfprec
from halfprec.export import ExportError, load_artifact
from halfprec.export.pt2_ops import ALLOWED_ATEN, refusal
from support import SUPPORT
from support.cli import run_cli
from support.export_models import example_inputs, tiny

MODELS = str(SUPPORT / "export_models.py")
_UINT8 = 1  # torch's serialized scalar type code for uint8


@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pt2") / "tiny.pt2"
    halfprec.export(tiny(), example_inputs(), path, "fp16", runs=0)
    return path


def _meta(size: int = 4) -> dict[str, Any]:
    return {
        "dtype": _UINT8,
        "sizes": [{"as_int": size}],
        "requires_grad": False,
        "device": {"type": "cpu", "index": None},
        "strides": [{"as_int": 1}],
        "storage_offset": {"as_int": 0},
        "layout": 7,
    }


def _node(target: str, inputs: list[tuple[str, dict[str, Any]]], out: str | None) -> dict:
    return {
        "target": target,
        # kind 1: positional, kind 2: keyword-only (dtype here)
        "inputs": [{"name": n, "arg": a, "kind": 2 if n == "dtype" else 1} for n, a in inputs],
        "outputs": [{"as_tensor": {"name": out}}] if out else [{"as_none": True}],
        "metadata": {},
        "is_hop_single_tensor_return": None,
    }


def _with_nodes(src: Path, dst: Path, nodes: list[dict], tensors: list[str]) -> Path:
    """A copy of ``src`` whose graph first runs ``nodes`` (uint8 tensors named ``tensors``)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("models/model.json"):
                program = json.loads(data)
                graph = program["graph_module"]["graph"]
                graph["tensor_values"].update({name: _meta() for name in tensors})
                graph["nodes"][0:0] = nodes
                data = json.dumps(program).encode()
            zout.writestr(info.filename, data)
    return dst


def _from_file_then_fill(src: Path, dst: Path, victim: Path, created: Path) -> Path:
    """The attack: map ``victim`` (and a new file ``created``) shared, then zero 4 bytes."""
    nodes, names = [], []
    for i, target in enumerate((victim, created)):
        nodes.append(
            _node(
                "torch.ops.aten.from_file.default",
                [
                    ("filename", {"as_string": str(target)}),
                    ("shared", {"as_bool": True}),
                    ("size", {"as_int": 4}),
                    ("dtype", {"as_scalar_type": _UINT8}),
                ],
                f"mapped{i}",
            )
        )
        nodes.append(
            _node(
                "torch.ops.aten.fill_.Scalar",
                [("self", {"as_tensor": {"name": f"mapped{i}"}}), ("value", {"as_int": 0})],
                f"zeroed{i}",
            )
        )
        names += [f"mapped{i}", f"zeroed{i}"]
    return _with_nodes(src, dst, nodes, names)


@pytest.fixture
def attack(good_pt2: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The from_file graph, its victim file (holding ``canary!!``) and the file it creates."""
    victim, created = tmp_path / "victim.txt", tmp_path / "created"
    victim.write_bytes(b"canary!!")
    return _from_file_then_fill(good_pt2, tmp_path / "evil.pt2", victim, created), victim, created


def test_torch_alone_lets_the_from_file_graph_overwrite_a_file(
    attack: tuple[Path, Path, Path],
) -> None:
    evil, victim, created = attack
    torch.export.load(evil).module()(x=torch.randn(2, 8))
    assert victim.read_bytes() == b"\0\0\0\0ry!!" and created.exists()  # the payload works


def test_the_from_file_graph_is_refused_and_the_canary_stays(
    attack: tuple[Path, Path, Path],
) -> None:
    evil, victim, created = attack
    with pytest.raises(ExportError, match=r"aten\.from_file, which is not on the allow-list"):
        load_artifact(evil)
    proc = run_cli("check", f"{MODELS}:tiny", "--artifact", str(evil), "--runs", "0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "refusing to load" in proc.stderr
    assert victim.read_bytes() == b"canary!!" and not created.exists()


_TENSOR = {"as_tensor": {"name": "x"}}


@pytest.mark.parametrize(
    ("node", "message"),
    [
        # storage: re-point a tensor at another storage, grow a storage
        (
            _node(
                "torch.ops.aten.set_.source_Tensor", [("self", _TENSOR), ("source", _TENSOR)], "s"
            ),
            r"aten\.set_, which is not on the allow-list",
        ),
        (
            _node(
                "torch.ops.aten.resize_.default",
                [("self", _TENSOR), ("size", {"as_ints": [9]})],
                "s",
            ),
            r"aten\.resize_, which is not on the allow-list",
        ),
        # the process: print to its stdout, change its profiler state
        (
            _node("torch.ops.aten._print.default", [("s", {"as_string": "hello"})], None),
            r"aten\._print, which is not on the allow-list",
        ),
        (
            _node(
                "torch.ops.profiler._record_function_enter_new.default",
                [("name", {"as_string": "x"})],
                None,
            ),
            r"profiler\._record_function_enter_new, which is not on the allow-list",
        ),
        # a string argument that is not one of its operator's enum values
        (
            _node(
                "torch.ops.aten.gelu.default",
                [("self", _TENSOR), ("approximate", {"as_string": "/etc/passwd"})],
                "s",
            ),
            r"passes the string '/etc/passwd' as 'approximate'",
        ),
        (
            _node(
                "torch.ops.aten.div.Tensor_mode",
                [("self", _TENSOR), ("other", _TENSOR), ("rounding_mode", {"as_string": "x/../y"})],
                "s",
            ),
            r"passes the string 'x/../y' as 'rounding_mode'",
        ),
        # a higher-order operator outside the list
        (
            _node("torch.ops.higher_order.run_const_graph", [], None),
            r"higher-order operator 'run_const_graph'",
        ),
    ],
    ids=["set_", "resize_", "_print", "profiler", "gelu-path", "div-mode", "hop"],
)
def test_each_kind_of_denied_operator_is_refused(
    good_pt2: Path, tmp_path: Path, node: dict, message: str
) -> None:
    evil = _with_nodes(good_pt2, tmp_path / "evil.pt2", [node], ["s"])
    with pytest.raises(ExportError, match=message):
        load_artifact(evil)


def test_the_allow_list_holds_no_operator_with_side_effects() -> None:
    for name in ("from_file", "set", "resize", "_print", "save", "load", "as_strided"):
        assert name not in ALLOWED_ATEN
    for name in sorted(ALLOWED_ATEN):  # every name is a real aten operator
        assert isinstance(getattr(torch.ops.aten, name), torch._ops.OpOverloadPacket), name


def _targets(path: Path) -> set[str]:
    found: set[str] = set()

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key == "target" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(obj, list):
            for value in obj:
                walk(value)

    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith(".json") and "/models/" in name:
                walk(json.loads(archive.read(name)))
    return found


def _assert_all_allowed(path: Path) -> None:
    for target in _targets(path):
        op = eval(target, {"torch": torch, "_operator": __import__("operator")})  # noqa: S307
        if isinstance(op, torch._ops.OpOverload | torch._ops.HigherOrderOperator):
            assert refusal(op, {}) is None, target
    load_artifact(path)  # and the whole file loads


def test_the_tiny_export_is_allowed(tmp_path: Path) -> None:
    _assert_all_allowed(halfprec.export(tiny(), example_inputs(), tmp_path / "t.pt2", "bf16").path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cnn", "minilm"])
def test_the_built_in_models_exports_are_allowed(name: str, tmp_path: Path) -> None:
    from halfprec.io.zoo import BUILTINS

    model, batches = BUILTINS[name].build()
    out = tmp_path / f"{name}.pt2"
    _assert_all_allowed(halfprec.export(model, batches[:1], out, "fp16", runs=0).path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "kv_cache"),
    [
        *[(n, False) for n in ("gpt2", "t5", "bart", "whisper", "vit", "clip", "wav2vec2")],
        *[(n, False) for n in ("mixtral", "qwen2-moe", "gemma2", "mamba2", "patchtst")],
        ("llama", True),
    ],
)
def test_halfprec_s_hugging_face_exports_are_allowed(
    name: str, kv_cache: bool, tmp_path: Path
) -> None:
    from halfprec.io.specs import load_model
    from support.hf_models import save

    loaded = load_model(str(save(name, tmp_path)))
    out = tmp_path / f"{name}.pt2"
    result = halfprec.export(
        loaded.model, loaded.example_inputs, out, "fp16", runs=0, kv_cache=kv_cache
    )
    _assert_all_allowed(result.path)
