"""``RuntimeModule``: an OpenVINO or onnxruntime graph called like the torch model, with the
model's output structure, and refusing what it cannot do (copies, other inputs)."""

from __future__ import annotations

import copy
import errno
import pickle
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

from halfprec import compare
from halfprec.batch import Args, call
from halfprec.errors import CheckpointError, HalfprecError, InputsError
from halfprec.runtimes import RuntimeModule, build_runtime
from halfprec.tree import flatten


class Pair(NamedTuple):
    score: torch.Tensor
    best: torch.Tensor


class Heads(nn.Module):
    """Keyword inputs, a dict holding a tensor and a namedtuple with an integer tensor."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)
        self.down = nn.Linear(64, 16)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> dict[str, Any]:
        h = self.down(torch.relu(self.norm(self.up(x)))) + bias
        return {"hidden": h, "pair": Pair(h.sum(-1), h.argmax(-1))}


def _batch(rows: int, seed: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(rows, 32, generator=gen), "bias": torch.randn(1, 16, generator=gen)}


_BUILT: dict[str, RuntimeModule] = {}
# onnxruntime's build is an ONNX export (~8 s on 2 busy cores): the slow tier runs it
RUNTIME_PARAMS = ["openvino", pytest.param("onnxruntime", marks=pytest.mark.slow)]


def _built(runtime: str) -> RuntimeModule:
    """Built once per runtime for this file (conversion takes a few seconds)."""
    pytest.importorskip(runtime)
    if runtime == "onnxruntime":
        pytest.importorskip("onnxscript")
    if runtime not in _BUILT:
        _BUILT[runtime] = build_runtime(Heads().eval(), runtime, torch.float32, _batch(8))
    return _BUILT[runtime]


def _structure(obj: Any) -> Any:
    """Types, keys and tensor dtypes: what two outputs share when only values differ."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", obj.dtype, obj.dim())
    if isinstance(obj, dict):
        return (type(obj), {k: _structure(v) for k, v in obj.items()})
    if isinstance(obj, tuple):
        return (type(obj), tuple(_structure(v) for v in obj))
    return type(obj)


@pytest.mark.parametrize("runtime", RUNTIME_PARAMS)
def test_outputs_come_back_as_the_models_structure_at_another_batch_size(runtime: str) -> None:
    built = _built(runtime)
    assert built.runtime == runtime and built.precision in ("f32", "fp32")
    assert list(built.parameters()) == []  # the runtime holds the weights, not torch
    ref = Heads().eval()
    batch = _batch(5, seed=2)  # other values, other batch size than the trace's 8
    with torch.no_grad():
        want = call(ref, batch)
    got = call(built, batch)
    assert _structure(got) == _structure(want)
    assert isinstance(got["pair"], Pair) and got["pair"].best.dtype == torch.int64
    assert {k: t.shape for k, t in flatten(got).items()} == {
        k: t.shape for k, t in flatten(want).items()
    }
    assert torch.equal(got["pair"].best, want["pair"].best)
    assert compare(ref, built, batch).passed  # halfprec's own check, every element
    # positional inputs bind like the model's
    positional = built(batch["x"], batch["bias"])
    assert torch.allclose(positional["hidden"], got["hidden"])


@pytest.mark.parametrize("runtime", RUNTIME_PARAMS)
def test_other_inputs_are_refused_with_the_names(runtime: str) -> None:
    built = _built(runtime)
    with pytest.raises(InputsError, match=r"built for inputs \['x', 'bias'\], got \['x'\]"):
        built(x=torch.randn(2, 32))
    with pytest.raises(InputsError):
        call(built, Args((torch.randn(2, 32),), {"x": torch.randn(2, 32)}))


@pytest.mark.parametrize("runtime", RUNTIME_PARAMS)
def test_in_process_only_copy_and_pickle_say_how_to_save(runtime: str) -> None:
    built = _built(runtime)
    msg = rf"RuntimeModule \({runtime}\) runs in this process only.*\.save\(path\)"
    with pytest.raises(HalfprecError, match=msg):
        copy.deepcopy(built)
    with pytest.raises(HalfprecError, match=msg):
        pickle.dumps(built)


@pytest.fixture
def bf16_default_core() -> Any:
    """An ``openvino.Core`` whose CPU default inference precision is bf16, as on a CPU with
    AVX512-BF16 or AMX, on any CPU (the property, set on this core only)."""
    ov = pytest.importorskip("openvino")
    core = ov.Core()
    core.set_property("CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
    return core


def test_openvino_saves_ir_that_openvino_loads_with_the_same_outputs(
    tmp_path: Path, bf16_default_core: Any
) -> None:
    from halfprec.runtimes.ov import PRECISION_KEY, compile_ir

    built = _built("openvino")
    written = built.save(tmp_path / "heads.xml")
    assert written.is_file() and (tmp_path / "heads.bin").is_file()
    # the IR carries the precision halfprec checked, f32, whatever this CPU defaults to
    ir = bf16_default_core.read_model(str(written))
    assert ir.get_rt_info(list(PRECISION_KEY)).astype(str) == built.precision == "f32"
    batch = _batch(3, seed=4)
    compiled = compile_ir(written, bf16_default_core)
    assert compiled.get_property("INFERENCE_PRECISION_HINT").to_string() == "f32"
    flat = compiled([batch[n].numpy() for n in built.input_names])
    got = flatten(built(**batch))
    assert len(built.output_names) == len(compiled.outputs) == 3
    for name, port in zip(built.output_names, compiled.outputs, strict=True):
        assert torch.allclose(torch.from_numpy(flat[port]), got[name])
    with pytest.raises(ValueError, match=r"saved as NAME\.xml"):
        built.save(tmp_path / "heads.onnx")
    # written beside the target and moved in: no staging folder is left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heads.bin", "heads.xml"]


def test_openvino_save_makes_missing_folders(tmp_path: Path) -> None:
    built = _built("openvino")
    built.save(tmp_path / "new" / "deeper" / "heads.xml")
    written = sorted(p.name for p in (tmp_path / "new" / "deeper").iterdir())
    assert written == ["heads.bin", "heads.xml"]
    (tmp_path / "plain").write_text("")
    with pytest.raises(NotADirectoryError, match="plain is not a folder"):
        built.save(tmp_path / "plain" / "heads.xml")


def test_a_full_disk_is_named_and_leaves_no_folder_it_made(tiny_fs: Path) -> None:
    """OpenVINO's own error is a bare "iostream error": the full disk is named instead."""
    built = _built("openvino")
    room = 64 * 1024 - 4096  # a full disk: the IR's ~13 KB of weights do not fit
    (tiny_fs / "filler").write_bytes(b"\0" * room)
    target = tiny_fs / "new" / "deeper" / "heads.xml"
    with pytest.raises(OSError) as caught:
        built.save(target)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert [p.name for p in tiny_fs.iterdir()] == ["filler"]


@pytest.mark.slow  # an ONNX export
def test_onnxruntime_saves_the_onnx_file(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    built = _built("onnxruntime")
    written = built.save(tmp_path / "heads.onnx")
    session = ort.InferenceSession(str(written), providers=["CPUExecutionProvider"])
    batch = _batch(3, seed=4)
    outs = session.run(list(built.output_names), {k: v.numpy() for k, v in batch.items()})
    got = flatten(built(**batch))
    for name, value in zip(built.output_names, outs, strict=True):
        assert torch.allclose(torch.from_numpy(value), got[name])


@pytest.mark.slow  # transformers and an OpenVINO trace of a decoder: ~10-16 s on 2 busy cores
def test_a_hugging_face_lm_with_its_cache_on_comes_back_as_its_model_output() -> None:
    pytest.importorskip("openvino")
    from testbed.hf_tiny import build

    model = build("gpt2")  # use_cache on: the trace takes the cache-free copy, as export does
    assert model.config.use_cache
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 128, (3, 11), generator=gen)
    batch = {"input_ids": ids[:2, :8], "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    built = build_runtime(model, "openvino", torch.float32, batch)
    longer = {"input_ids": ids, "attention_mask": torch.ones(3, 11, dtype=torch.long)}
    out = built(**longer)
    with torch.no_grad():
        want = model(**longer)
    assert type(out) is type(want) and list(out.keys()) == ["logits"]
    assert out.logits.shape == want.logits.shape == (3, 11, 128)
    assert compare(model, built, longer).passed
    assert model.config.use_cache  # the caller's config is left as it was


@pytest.mark.parametrize("runtime", RUNTIME_PARAMS)
def test_halfprec_save_refuses_it_naming_the_runtimes_own_save(
    runtime: str, tmp_path: Path
) -> None:
    import halfprec

    built = _built(runtime)
    out = tmp_path / "deployed.safetensors"
    with pytest.raises(CheckpointError, match=rf"\({runtime}\) holds no tensors.*model\.save"):
        halfprec.save(built, out)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_halfprec_save_refuses_a_model_that_holds_one(tmp_path: Path) -> None:
    import halfprec

    model = nn.ModuleDict({"body": _built("openvino"), "head": nn.Linear(16, 4)})
    out = tmp_path / "m.safetensors"
    with pytest.raises(CheckpointError, match=r"submodule 'body' runs in openvino.*body\.save"):
        halfprec.save(model, out)
    assert list(tmp_path.iterdir()) == []
