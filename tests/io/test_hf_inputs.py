"""Example inputs of Hugging Face directories saved with the processor a real checkpoint
ships (testbed.hf_processors): built as the model card calls the processor."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from halfprec.batch import call
from halfprec.io.hf_inputs import NoExampleInputs
from halfprec.io.hf_series import forecast_inputs
from halfprec.io.specs import load_model
from testbed.hf_processors import save


def load_tokenizer(path: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf_inputs")


def _loaded(root: Path, name: str):  # type: ignore[no-untyped-def]
    path = root / name
    if not path.is_dir():
        save(name, path)
    return load_model(str(path))


def _runs(loaded) -> None:  # type: ignore[no-untyped-def]
    (batch,) = loaded.example_inputs
    with torch.no_grad():
        call(loaded.model, batch)  # the fp32 model takes them: no refusal of halfprec's inputs


def test_a_fixed_window_feature_extractor_keeps_its_own_padding(root: Path) -> None:
    loaded = _loaded(root, "whisper-30s")
    (batch,) = loaded.example_inputs
    # WhisperFeatureExtractor pads every clip to 30 s: 3000 frames, what the encoder takes
    assert batch["input_features"].shape == (2, 80, 3000)
    assert batch["decoder_input_ids"].shape[0] == 2
    assert "WhisperFeatureExtractor" in loaded.inputs_built[0]
    _runs(loaded)


def test_a_speech_model_gets_the_decoder_prompt_generate_starts_with(root: Path) -> None:
    loaded = _loaded(root, "whisper-30s")
    (batch,) = loaded.example_inputs
    tokenizer = load_tokenizer(root / "whisper-30s")
    prompt = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
    for row in batch["decoder_input_ids"].tolist():
        assert tokenizer.convert_ids_to_tokens(row[:4]) == prompt
        assert tokenizer.decode(row[4:], skip_special_tokens=True).strip()  # text follows
    assert "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>" in " ".join(
        loaded.inputs_built
    )
    _runs(loaded)


def test_an_image_captioning_pair_gets_one_batch_size_from_its_processor(root: Path) -> None:
    loaded = _loaded(root, "blip-captioning")
    (batch,) = loaded.example_inputs
    assert set(batch) >= {"pixel_values", "input_ids", "attention_mask"}
    assert {t.shape[0] for t in batch.values()} == {2}
    assert batch["pixel_values"].shape[-2:] == (32, 32)  # the processor's own size
    assert "BlipProcessor" in " ".join(loaded.inputs_built)
    _runs(loaded)


def test_an_audio_text_pair_gets_one_batch_size_from_its_processor(root: Path) -> None:
    # CLAP: sentences and waveforms through ClapProcessor in one call (its feature
    # extractor's 10 s window of 64 mel bins at 48 kHz), not 16 sentences and no audio
    loaded = _loaded(root, "clap")
    (batch,) = loaded.example_inputs
    assert batch["input_ids"].shape[0] == batch["input_features"].shape[0] == 2
    assert batch["input_features"].shape[2:] == (1001, 64)
    assert "ClapProcessor" in loaded.inputs_built[0]
    with torch.no_grad():
        out = call(loaded.model, batch)
    assert out["logits_per_audio"].shape == (2, 2)


def test_a_vision_language_model_gets_its_image_tokens_from_the_chat_template(
    root: Path,
) -> None:
    loaded = _loaded(root, "llava")
    (batch,) = loaded.example_inputs
    image = loaded.model.config.image_token_id
    # one photo a prompt: (32 / 8) ** 2 = 16 patch features, 16 image tokens in each row
    assert (batch["input_ids"] == image).sum(dim=1).tolist() == [16, 16]
    assert batch["pixel_values"].shape[0] == 2
    assert "chat template" in loaded.inputs_built[0]
    _runs(loaded)


def test_a_processor_that_adds_training_labels_gives_inference_inputs(root: Path) -> None:
    # PaliGemmaProcessor always returns labels (all -100 without a suffix): passed on, the
    # forward computes a loss over no tokens, NaN, and the fp32 reference is "broken"
    loaded = _loaded(root, "paligemma")
    (batch,) = loaded.example_inputs
    assert "labels" not in batch
    assert (batch["input_ids"] == loaded.model.config.image_token_id).sum(dim=1).tolist() == [
        16,
        16,
    ]
    with torch.no_grad():
        out = call(loaded.model, batch)
    assert out.get("loss") is None and torch.isfinite(out["logits"]).all()


def test_a_vision_language_model_without_its_processor_is_refused_naming_why(
    root: Path, tmp_path: Path
) -> None:
    source = _loaded(root, "llava")
    source.model.save_pretrained(tmp_path / "bare")  # the weights, no processor files
    bare = load_model(str(tmp_path / "bare"))
    assert bare.example_inputs == []
    assert "image token" in bare.no_inputs and "processor" in bare.no_inputs


@pytest.mark.parametrize("name", ["time-series-transformer", "informer", "autoformer"])
def test_a_forecasting_model_gets_time_features_and_an_observed_mask(root: Path, name: str) -> None:
    loaded = _loaded(root, name)
    (batch,) = loaded.example_inputs
    config = loaded.model.config
    past = config.context_length + max(config.lags_sequence)
    assert batch["past_values"].shape == (2, past)
    assert batch["past_time_features"].shape == (2, past, config.num_time_features)
    assert torch.equal(batch["past_observed_mask"], torch.ones(2, past))
    assert batch["future_values"].shape == (2, config.prediction_length)
    _runs(loaded)


def test_a_forecasting_config_without_its_sizes_names_the_missing_field() -> None:
    with pytest.raises(ValueError, match="no context_length"):
        forecast_inputs(SimpleNamespace(context_length=0), {"past_values"}, 2)
    config = SimpleNamespace(context_length=8, lags_sequence=[], num_time_features=1)
    with pytest.raises(ValueError, match="lags_sequence is empty"):
        forecast_inputs(config, {"past_values"}, 2)


def test_no_example_inputs_names_the_format() -> None:
    exc = NoExampleInputs("X takes y")
    assert exc.problem == "X takes y" and "--inputs FILE" in str(exc)
