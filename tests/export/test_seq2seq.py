"""Encoder-decoders exported with both KV caches as tensors, in two files (``--kv-cache``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from halfprec.export import ExportError, export, load_artifact
from halfprec.export.seq2seq import DecoderWithPast, EncoderWithCross
from halfprec.io.specs import load_model
from support.hf_models import save
from testbed.decode import DecodeCheck, decode_seq2seq_against_fp32, left_padded_prompts

transformers = pytest.importorskip("transformers")

STEPS = 8


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf_kv_seq2seq")


def _loaded(name: str, root: Path) -> tuple[Any, dict[str, torch.Tensor]]:
    """The fp32 model and an encoder batch: two prompts, one padded (Whisper: features)."""
    loaded = load_model(str(save(name, root)))
    model: Any = loaded.model.eval()
    if name == "whisper":
        return model, {"input_features": loaded.example_inputs[0]["input_features"]}
    ids, mask = left_padded_prompts(model.config.vocab_size)
    return model, {"input_ids": ids, "attention_mask": mask}


def _decode(encode: Any, run: Any, model: Any, batch: dict[str, torch.Tensor]) -> DecodeCheck:
    check = decode_seq2seq_against_fp32(encode, run, model, batch, STEPS)
    assert check.passed, check
    return check


@pytest.mark.parametrize("name", ["bart", "t5", "whisper"])
def test_fp32_wrappers_generate_what_transformers_generates(hf_root: Path, name: str) -> None:
    model, batch = _loaded(name, hf_root)
    encoder, decoder = EncoderWithCross(model), DecoderWithPast(model)
    with torch.no_grad():
        check = _decode(lambda b: encoder(**b), lambda b: decoder(**b), model, batch)
        # one token more: BART forces its end token at max_length
        want = model.generate(
            **batch, max_new_tokens=STEPS + 1, min_new_tokens=STEPS + 1, do_sample=False
        )
    # generate starts with decoder_start_token_id
    assert check.tokens == want[:, 1 : STEPS + 1].tolist()
    assert check.worst < 1e-4


@pytest.mark.slow
def test_cli_seq2seq_kv_cache_writes_two_files_that_decode_like_fp32(  # type: ignore[no-untyped-def]
    cli, hf_root: Path, tmp_path: Path
) -> None:
    folder, out = save("bart", hf_root), tmp_path / "b.pt2"
    proc = cli("export", str(folder), "-o", str(out), "--kv-cache")
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())  # the encoder file first, then the decoder's
    assert said.index(f"wrote {tmp_path / 'b.encoder.pt2'}") < said.index(f"wrote {out}")
    assert said.count("PASS") == 2
    encoder_file = tmp_path / "b.encoder.pt2"
    assert sorted(tmp_path.iterdir()) == [encoder_file, out]
    for path, batches in ((out, 3), (encoder_file, 2)):  # check --artifact takes either file
        proc = cli("check", str(folder), "--artifact", str(path), "--json")
        assert proc.returncode == 0, proc.stderr
        verdict = json.loads(proc.stdout)
        assert verdict["passed"] is True and verdict["batches"] == batches
    encode, step = load_artifact(encoder_file), load_artifact(out)
    assert encode.info.kv_cache and step.info.kv_cache
    assert step.info.inputs == (
        "decoder_input_ids",
        "encoder_hidden_states",
        "attention_mask",
        "past_key_values.0.key",
        "past_key_values.0.value",
        "cross_key_values.0.key",
        "cross_key_values.0.value",
    )
    assert step.info.outputs == ("logits", "present_key_values.0.key", "present_key_values.0.value")
    assert encode.info.outputs == (
        "encoder_hidden_states",
        "cross_key_values.0.key",
        "cross_key_values.0.value",
    )
    # the fp16 files decode 8 tokens like fp32 without a cache (T5, Whisper and BART ONNX:
    # benchmarks/kv_cache.py)
    model, batch = _loaded("bart", hf_root)
    assert 0 < _decode(encode, step, model, batch).worst < 0.05


def test_seq2seq_kv_cache_refuses_short_decoder_examples_without_files(
    hf_root: Path, tmp_path: Path
) -> None:
    model, batch = _loaded("t5", hf_root)
    with pytest.raises(ExportError, match="decoder_input_ids of at least 4 tokens, got 3"):
        export(
            model,
            {**batch, "decoder_input_ids": torch.zeros(2, 3, dtype=torch.long)},
            tmp_path / "t.pt2",
            kv_cache=True,
        )
    with pytest.raises(ExportError, match="needs example batches with decoder_input_ids"):
        export(model, batch, tmp_path / "t.pt2", kv_cache=True)
    assert not list(tmp_path.iterdir())
