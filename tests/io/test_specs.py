from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from halfprec import convert
from halfprec.batch import call
from halfprec.errors import ModelSpecError
from halfprec.io.specs import load_model
from support import FIXTURES
from support.cli import run_cli, run_cli_subprocess
from support.hf_models import build

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


def test_check_on_a_bf16_directory_reports_the_stored_dtype(tmp_path: Path) -> None:

    build("llama").to(torch.bfloat16).save_pretrained(tmp_path)
    result = run_cli("check", str(tmp_path), "--dtype", "bf16", "--runs", "0", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["stored_dtype"] == "bf16"
    # an fp32 reference holds twice the bytes of its bf16 conversion (not bf16 vs bf16)
    assert data["bytes_fp32"] > 1.9 * data["bytes_half"]
    assert "note: " in result.stderr and "stores bf16 weights" in result.stderr


def _code_that_marks(marker: Path) -> str:
    return f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"


def _remote_model_directory(root: Path, marker: Path) -> Path:
    """A directory whose config.json asks (auto_map) for its own Python code."""
    root.mkdir()
    config = {
        "model_type": "marknet",
        "auto_map": {"AutoConfig": "config_mark.MarkConfig", "AutoModel": "model_mark.MarkNet"},
    }
    (root / "config.json").write_text(json.dumps(config))
    code = _code_that_marks(marker)
    (root / "config_mark.py").write_text(
        code + "from transformers import PretrainedConfig\n"
        "class MarkConfig(PretrainedConfig):\n    model_type = 'marknet'\n"
    )
    (root / "model_mark.py").write_text(code)
    return root


def _remote_tokenizer_directory(root: Path, marker: Path) -> Path:
    """A plain BERT directory whose tokenizer_config.json asks for its own tokenizer code."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    BertModel(cfg).save_pretrained(root)
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"]))
    tokenizer_config = {"auto_map": {"AutoTokenizer": ["tok_mark.MarkTokenizer", None]}}
    (root / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (root / "tok_mark.py").write_text(_code_that_marks(marker))
    return root


@pytest.mark.parametrize(
    ("make", "refused"), [(_remote_model_directory, True), (_remote_tokenizer_directory, False)]
)
def test_a_directory_s_own_code_never_runs_even_if_stdin_says_yes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Any, refused: bool
) -> None:
    marker = tmp_path / "RAN_CODE"
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    path = make(tmp_path / "model", marker)
    result = run_cli_subprocess("check", str(path), "--runs", "0", stdin="y\ny\ny\n")
    assert not marker.exists(), "the directory's Python code ran"
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    if not refused:  # transformers' own tokenizer class for the files, without the code
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 2, result.stderr
    line = "halfprec: error: " + f"{path} needs its own Python code (auto_map in its config)"
    assert result.stderr.startswith(line) and result.stderr.count("\n") == 1


def _save_tokenizer_without_pad(path: Path) -> None:
    """A real fast tokenizer with an eos token and no pad token, as GPT-2's and Llama's."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from halfprec.io.zoo import sentences

    words = {w for s in sentences() for w in s.lower().replace(".", " ").split()}
    vocab = {w: i for i, w in enumerate(["</s>", "<unk>", *sorted(words)[:100]])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    assert fast.pad_token is None
    fast.save_pretrained(str(path))


def test_a_tokenizer_without_pad_token_pads_with_eos_and_says_so(tmp_path: Path) -> None:
    build("gpt2").save_pretrained(tmp_path)
    _save_tokenizer_without_pad(tmp_path)
    result = run_cli("check", str(tmp_path), "--dtype", "fp16", "--runs", "0", "--json")
    assert result.returncode == 0, result.stderr
    note = "has no pad token; padding with its eos token '</s>' (id 0), as transformers.pipeline"
    assert note in result.stderr and note in json.loads(result.stdout)["notes"][0]
    batch = load_model(str(tmp_path)).example_inputs[0]
    padded = batch["attention_mask"] == 0
    assert padded.any() and (batch["input_ids"][padded] == 0).all()
