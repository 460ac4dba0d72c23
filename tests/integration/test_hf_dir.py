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


def _with_processor(name: str, path: Path) -> None:
    """The directory's own preprocessor, as a downloaded checkpoint has one."""
    from transformers import ViTImageProcessor, Wav2Vec2FeatureExtractor

    if name == "vit":
        ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(str(path))
    elif name == "wav2vec2":
        Wav2Vec2FeatureExtractor(return_attention_mask=True).save_pretrained(str(path))


@pytest.mark.parametrize(
    ("name", "processor", "note"),
    [
        ("vit", True, ""),
        ("clip", False, "scikit-learn's two sample photos are resized to 32x32"),
        ("wav2vec2", True, "input_values: a synthetic 1 s waveform at 16000 Hz through"),
        ("patchtst", False, "past_values: 32 steps of 3 synthetic seasonal series"),
    ],
)
def test_check_builds_inputs_for_vision_audio_multimodal_and_time_series(
    tmp_path: Path, name: str, processor: bool, note: str
) -> None:
    source = save(name, tmp_path)
    if processor:
        _with_processor(name, source)
    proc = run_cli("check", str(source), "--runs", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"]
    assert note in " ".join(data["notes"])


def _time_series_transformer(path: Path) -> None:
    from transformers import TimeSeriesTransformerConfig, TimeSeriesTransformerForPrediction

    config = TimeSeriesTransformerConfig(
        prediction_length=4, context_length=8, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
        decoder_ffn_dim=16, lags_sequence=[1, 2],
    )  # fmt: skip
    TimeSeriesTransformerForPrediction(config).save_pretrained(str(path))


def test_a_forecasting_model_with_time_features_checks_from_its_config(tmp_path: Path) -> None:
    _time_series_transformer(tmp_path)
    proc = run_cli("check", str(tmp_path), "--runs", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"]
    assert "10 steps (context_length 8 + max(lags_sequence) 2)" in " ".join(data["notes"])


def test_inputs_a_model_takes_but_halfprec_cannot_build_are_named(tmp_path: Path) -> None:
    from testbed.hf_processors import save as save_with_processor

    source = save_with_processor("llava", tmp_path / "llava")
    (source / "processor_config.json").unlink()  # the tokenizer stays, the processor goes
    proc = run_cli("check", str(source), "--runs", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(
        f"halfprec: error: LlavaForConditionalGeneration in {source} places images at image "
        "token 4 in its text, which only its processor lays out, and the directory has no "
        "text-and-image processor"
    )
    assert "pass --inputs FILE, a .safetensors file with one tensor per input name" in proc.stderr


def test_convert_leaves_no_outdir_behind_a_check_that_refuses(tmp_path: Path) -> None:
    from transformers import ViTImageProcessor

    source = save("vit", tmp_path)  # its config takes 32x32 images; the processor makes 48x48
    ViTImageProcessor(size={"height": 48, "width": 48}).save_pretrained(str(source))
    out = tmp_path / "out"
    proc = run_cli("convert", str(source), "--dtype", "bf16", "-o", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("halfprec: error: the fp32 model failed on batch 0")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".halfprec-")]


def test_convert_directory_is_a_library_call_that_checks_on_the_given_device(
    tmp_path: Path,
) -> None:
    from halfprec.io.hf_convert import convert_directory

    source = save("clip", tmp_path)
    done = convert_directory(source, tmp_path / "out", halfprec.Recipe(dtype="bf16"), device="cpu")
    assert done.device == "cpu" and done.check is not None and done.check.passed
    assert done.written.path == tmp_path / "out" and "config.json" in done.written.files
    assert done.to_json()["transformers_check"]["passed"]
    # the half dtype, although CLIP's first parameter is a small fp32 one: plain
    # from_pretrained loads it in bf16, not all in fp32
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "bfloat16"
    assert not any(done.transformers_keeps_fp32.values())


def test_convert_directory_without_example_inputs_says_how_to_check_it(tmp_path: Path) -> None:
    from halfprec.io.hf_convert import convert_directory
    from testbed.hf_processors import save as save_with_processor

    source = save_with_processor("llava", tmp_path / "llava")
    (source / "processor_config.json").unlink()  # a VLM without its processor
    out = tmp_path / "out"
    done = convert_directory(source, out, halfprec.Recipe(dtype="bf16"), device="cpu")
    assert done.check is None and (out / "config.json").is_file()
    assert "places images at image token 4 in its text" in done.unchecked
    assert done.unchecked.endswith(f"; check it with halfprec check {out} --inputs FILE")


def test_convert_refuses_a_folder_plain_transformers_cannot_run_on_the_device(
    tmp_path: Path,
) -> None:
    # Autoformer's attention runs torch.fft, which has no bf16 kernel on the CPU: halfprec
    # keeps it fp32, plain from_pretrained of a bf16 folder would run it in bf16 and stop
    from testbed.hf_processors import save as save_with_processor

    source = save_with_processor("autoformer", tmp_path / "autoformer")
    out = tmp_path / "out"
    proc = run_cli("convert", str(source), "--dtype", "bf16", "-o", str(out), "--device", "cpu")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(
        "halfprec: error: plain transformers from_pretrained of the bf16 folder cannot run on "
        "cpu: Unsupported dtype BFloat16 at modeling_autoformer.py:"
    )
    assert "(torch.fft, https://github.com/pytorch/pytorch/issues/117844)" in proc.stderr
    assert "nothing was written: write -o FILE.safetensors" in proc.stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".halfprec-")]
    # the file output the refusal suggests is written
    file = tmp_path / "autoformer.safetensors"
    proc = run_cli("convert", str(source), "--dtype", "bf16", "-o", str(file), "--device", "cpu")
    assert proc.returncode == 0 and file.is_file(), proc.stderr


@pytest.mark.slow
def test_autoformer_export_refusal_names_the_upstream_limit_behind_the_mask_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Autoformer fails first in transformers' own mask branch (not reported upstream); the
    # refusal also names what stops it past that branch, which this test shows for real by
    # letting transformers skip the all-valid mask under export as eager does
    import transformers.masking_utils as masking

    from testbed.hf_processors import save as save_with_processor

    # torch._dynamo turns torch.distributions' argument checks off for the whole process the
    # first time anything compiles (eval_frame's TorchPatcher), as earlier tests in this
    # worker may have; a user's fresh `halfprec export` process has them on
    monkeypatch.setattr(torch.distributions.Distribution, "_validate_args", True)
    source = save_with_processor("autoformer", tmp_path / "autoformer")
    out = tmp_path / "m.pt2"
    proc = run_cli("export", str(source), "--dtype", "bf16", "-o", str(out), "--runs", "0")
    error = proc.stderr.splitlines()[-1]  # after the note on the inputs halfprec built
    assert proc.returncode == 2 and error.startswith("halfprec: error: torch.export failed")
    assert "modeling_autoformer.py" in error and "not reported upstream" in error
    assert "https://github.com/pytorch/pytorch/issues/135061" in error
    skip = masking._ignore_bidirectional_mask_sdpa

    def eager_skip(padding_mask: object, kv_length: int, local: int | None = None) -> bool:
        return padding_mask is None or skip(padding_mask, kv_length, local)

    monkeypatch.setattr(masking, "_ignore_bidirectional_mask_sdpa", eager_skip)
    proc = run_cli("export", str(source), "--dtype", "bf16", "-o", str(out), "--runs", "0")
    note, error = proc.stderr.splitlines()  # torch's graph dumps are not printed
    assert note.startswith("note: past_values")
    assert proc.returncode == 2 and error.startswith("halfprec: error: torch.export cannot")
    assert "modeling_autoformer.py" not in error
    assert "https://github.com/pytorch/pytorch/issues/135061" in error
    assert not out.exists()


def test_a_folder_plain_transformers_fails_on_is_written_and_exits_1(tmp_path: Path) -> None:
    """XLNet's code builds its positions in fp32 and meets bf16 weights with them: plain
    transformers cannot run the bf16 folder (halfprec's own model can, with its guards).
    The folder is written, the FAIL is a finding (exit 1, as in check), and the line after it
    names the load that gives back halfprec's model."""
    import transformers as tf

    config = tf.XLNetConfig(vocab_size=128, d_model=32, n_layer=1, n_head=2, d_inner=64)
    torch.manual_seed(0)
    tf.XLNetLMHeadModel(config).save_pretrained(tmp_path / "xlnet")
    out = tmp_path / "out"
    proc = run_cli("convert", str(tmp_path / "xlnet"), "--dtype", "bf16", "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "from_pretrained against fp32 on cpu: FAIL (batch 0: the half model raised" in " ".join(
        proc.stdout.split()
    )
    assert "halfprec.load(" in proc.stdout and (out / RECIPE_FILE).is_file()
    half = halfprec.load(out, into=lambda: tf.XLNetLMHeadModel(config))
    assert halfprec.recipe_of(half).dtype == torch.bfloat16
    with torch.no_grad():
        assert bool(half(input_ids=torch.tensor([[5, 6, 7]])).logits.isfinite().all())
