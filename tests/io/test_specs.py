from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from halfprec import convert
from halfprec.batch import call
from halfprec.errors import ModelSpecError
from halfprec.io.specs import load_model
from support import FIXTURES

FIXTURE = FIXTURES / "user_model.py"


def test_file_factory_with_example_inputs() -> None:
    loaded = load_model(f"{FIXTURE}:build")
    assert isinstance(loaded.model, nn.Module) and not loaded.model.training
    assert len(loaded.example_inputs) == 2


def test_module_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURE.parent))
    loaded = load_model("user_model:build")
    assert type(loaded.model).__name__ == "Net" and loaded.example_inputs


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nothing-like-a-spec", "unknown MODEL 'nothing-like-a-spec'"),
        ("builtin:resnet9000", "unknown builtin model 'resnet9000'; choose one of: minilm"),
        (f"{FIXTURE}:broken", "the factory raised RuntimeError: weights not found"),
        (f"{FIXTURE}:not_a_module", "returned int, not an nn.Module"),
        (f"{FIXTURE}:missing", "no callable 'missing'"),
        ("no/such/file.py:build", "not found; check the path"),
        ("no_such_package_xyz:build", "cannot import module 'no_such_package_xyz'"),
    ],
)
def test_bad_specs_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(ModelSpecError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_model(spec)


def test_torchscript_file_converts_and_runs(tmp_path: Path) -> None:
    loaded = load_model(f"{FIXTURE}:build")
    path = tmp_path / "net.ts"
    torch.jit.save(torch.jit.script(loaded.model), str(path))
    ts = load_model(str(path))
    x = loaded.example_inputs[0]
    half = convert(ts.model, "bf16")
    out = half(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, loaded.model(x), atol=0.05, rtol=0.05)


def test_pickle_file_is_not_taken_for_torchscript(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(b"\x80\x04not a zip archive")
    with pytest.raises(ModelSpecError, match="not a TorchScript archive"):
        load_model(str(path))


def test_hugging_face_directory(tmp_path: Path) -> None:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
    )
    BertModel(cfg).save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path))
    assert loaded.example_inputs and loaded.example_inputs[0]["input_ids"].max() < 100
    out = call(convert(loaded.model, "fp16"), loaded.example_inputs[0])
    assert out.last_hidden_state.dtype == torch.float32


def test_directory_without_config() -> None:
    with pytest.raises(ModelSpecError, match="without config.json"):
        load_model(str(FIXTURE.parent))


def test_builtin_cnn_has_real_batchnorm_statistics() -> None:
    loaded = load_model("builtin:cnn")
    bn = loaded.model.stem[1]
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
    assert len(loaded.example_inputs) == 2
