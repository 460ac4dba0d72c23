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
from support.hf_models import build, save_tokenizer_without_pad

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


def test_a_weights_file_given_as_the_model_names_weights(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    with pytest.raises(ModelSpecError, match="holds weights, not a model.*--weights"):
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


def test_bf16_directory_loads_as_an_fp32_reference(tmp_path: Path) -> None:
    stored = build("llama").to(torch.bfloat16)
    stored.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path))
    assert loaded.stored_dtype == "bf16"
    assert "stores bf16 weights; they are loaded in fp32" in loaded.notes[0]
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    batch = loaded.example_inputs[0]
    upcast = build("llama")  # the reference must be exactly the stored values, in fp32
    upcast.load_state_dict({k: v.float() for k, v in stored.state_dict().items()})
    torch.testing.assert_close(
        call(loaded.model, batch).logits, call(upcast, batch).logits, rtol=0, atol=0
    )


def test_a_tokenizer_without_pad_token_pads_with_eos_and_says_so(tmp_path: Path) -> None:
    build("gpt2").save_pretrained(tmp_path)
    save_tokenizer_without_pad(tmp_path)
    loaded = load_model(str(tmp_path))
    note = "has no pad token; padding with its eos token '</s>' (id 0), as transformers.pipeline"
    assert note in loaded.notes[0]
    batch = loaded.example_inputs[0]
    padded = batch["attention_mask"] == 0
    assert padded.any() and (batch["input_ids"][padded] == 0).all()


_OP_FILE = """
import torch
from torch import nn


@torch.library.custom_op("halfprec_spec_tests::{name}", mutates_args=())
def shift(x: torch.Tensor) -> torch.Tensor:
    return x + {offset}


@shift.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Net(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return shift(x)


def build() -> nn.Module:
    return Net()
"""


def test_a_model_file_runs_once_per_process_until_its_bytes_change(tmp_path: Path) -> None:
    """Running a file again would define its custom operator again; torch then destroys the
    first definition, and the first model crashes the process when called."""
    path = tmp_path / "op_model.py"
    path.write_text(_OP_FILE.format(name="shift", offset=1))
    first = load_model(f"{path}:build").model
    packet = torch.ops.halfprec_spec_tests.shift
    second = load_model(f"{path}:build").model
    assert type(second) is type(first)  # the file did not run again
    assert torch.ops.halfprec_spec_tests.shift is packet  # so the operator was not redefined
    assert torch.equal(first(torch.zeros(2)), torch.ones(2))
    path.write_text(_OP_FILE.format(name="shift_edited", offset=2))
    edited = load_model(f"{path}:build").model
    assert type(edited) is not type(first)  # new bytes: the file runs again
    assert torch.equal(edited(torch.zeros(2)), torch.full((2,), 2.0))


def test_the_export_models_file_run_as_a_spec_keeps_its_operator() -> None:
    """tests/support/export_models.py is imported and also run as a CLI MODEL spec in one test
    worker: running it must not redefine the operator the imported module's models call."""
    from support import SUPPORT
    from support.export_models import custom

    model = custom()
    packet = torch.ops.halfprec_tests.wobble
    copy = load_model(f"{SUPPORT / 'export_models.py'}:custom").model
    assert torch.ops.halfprec_tests.wobble is packet
    x = torch.randn(2, 8)
    assert torch.equal(model(x), copy(x))
