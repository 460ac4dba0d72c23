"""``halfprec check`` on a Hugging Face directory: the dtype it stores, a tokenizer without a
pad token, and the directory's own code, which never runs; and the tolerance it judges by:
the --recipe's, with --min-cosine/--min-sqnr replacing one threshold, for --artifact too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from support.cli import run_cli, run_cli_subprocess
from support.hf_models import build, save_tokenizer_without_pad


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


def test_a_tokenizer_without_pad_token_says_so_on_stderr_and_in_the_json(tmp_path: Path) -> None:
    # the padding itself: tests/io/test_specs.py
    build("gpt2").save_pretrained(tmp_path)
    save_tokenizer_without_pad(tmp_path)
    result = run_cli("check", str(tmp_path), "--dtype", "fp16", "--runs", "0", "--json")
    assert result.returncode == 0, result.stderr
    note = "has no pad token; padding with its eos token '</s>' (id 0), as transformers.pipeline"
    assert note in result.stderr and note in json.loads(result.stdout)["notes"][0]


@pytest.mark.slow  # an ONNX export
def test_check_artifact_judges_by_the_recipes_tolerance(tmp_path: Path) -> None:
    """``check --artifact --recipe R`` applies R's tolerance (it used the defaults), and a
    threshold flag replaces that one threshold of R's only."""
    from halfprec import Recipe, Tolerance
    from support import SUPPORT

    model = f"{SUPPORT / 'export_models.py'}:tiny"
    onnx = tmp_path / "tiny.onnx"
    made = run_cli("export", model, "-o", str(onnx), "--dtype", "fp16", "--runs", "0", "--json")
    assert made.returncode == 0, made.stderr
    strict = Recipe(dtype="fp16", tolerance=Tolerance(min_sqnr_db=200.0)).save(
        tmp_path / "strict.json"
    )
    plain = run_cli("check", model, "--artifact", str(onnx), "--json")
    assert plain.returncode == 0, plain.stderr
    judged = run_cli("check", model, "--artifact", str(onnx), "--recipe", str(strict), "--json")
    assert judged.returncode == 1, judged.stderr
    data = json.loads(judged.stdout)
    assert data["passed"] is False and data["tolerance"]["min_sqnr_db"] == 200.0
    loosened = run_cli(
        "check", model, "--artifact", str(onnx), "--recipe", str(strict), "--min-sqnr", "20"
    )
    assert loosened.returncode == 0, loosened.stdout + loosened.stderr


def test_check_flags_replace_one_threshold_of_the_recipes_tolerance(tmp_path: Path) -> None:
    from halfprec import Recipe, Tolerance
    from support import SUPPORT

    model = f"{SUPPORT / 'export_models.py'}:tiny"
    recipe = Recipe(dtype="fp16", tolerance=Tolerance(min_cosine=0.5, min_sqnr_db=200.0))
    path = recipe.save(tmp_path / "r.json")
    out = run_cli(
        "check", model, "--recipe", str(path), "--min-sqnr", "10", "--runs", "0", "--json"
    )
    assert out.returncode == 0, out.stderr
    tolerance = json.loads(out.stdout)["comparison"]["tolerance"]
    assert tolerance["min_sqnr_db"] == 10.0 and tolerance["min_cosine"] == 0.5


def test_a_failure_on_inputs_halfprec_built_says_so_and_on_the_user_s_advises_them(
    cli: Any, tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    import transformers as tf
    from safetensors.torch import save_file

    from testbed.hf_processors import save

    source = save("whisper-30s", tmp_path / "whisper")
    # a feature extractor of a 1 s window: 100 frames, where the encoder takes 3000
    processor = tf.WhisperProcessor.from_pretrained(str(source))
    processor.feature_extractor = tf.WhisperFeatureExtractor(feature_size=80, chunk_length=1)
    processor.save_pretrained(str(source))
    proc = cli("check", str(source), "--runs", "0")
    assert proc.returncode == 2, proc.stderr
    notes, line = proc.stderr.splitlines()[:-1], proc.stderr.splitlines()[-1]
    assert all(n.startswith("note: ") for n in notes), proc.stderr
    assert line.startswith("halfprec: error: the fp32 model refuses the example inputs halfprec")
    assert "WhisperFeatureExtractor" in line and "not yours" in line
    assert "check the inputs' names" not in line
    mine = tmp_path / "mine.safetensors"
    save_file({"input_features": torch.zeros(1, 80, 100)}, str(mine))
    proc = cli("check", str(source), "--runs", "0", "--inputs", str(mine))
    assert proc.returncode == 2, proc.stderr
    assert "check the inputs' names, shapes and dtypes" in proc.stderr
    assert "halfprec built" not in proc.stderr
