"""Encoder-decoders exported with both KV caches as tensors, in two files (``--kv-cache``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from halfprec.export import ExportError, export
from halfprec.export.seq2seq import DecoderWithPast, EncoderWithCross
from support.kv_decode import STEPS, decode_seq2seq, seq2seq_model

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf_kv_seq2seq")


@pytest.mark.parametrize("name", ["bart", "t5", "whisper"])
def test_fp32_wrappers_generate_what_transformers_generates(hf_root: Path, name: str) -> None:
    model, batch = seq2seq_model(name, hf_root)
    encoder, decoder = EncoderWithCross(model), DecoderWithPast(model)
    with torch.no_grad():
        check = decode_seq2seq(lambda b: encoder(**b), lambda b: decoder(**b), model, batch)
        # one token more: BART forces its end token at max_length
        want = model.generate(
            **batch, max_new_tokens=STEPS + 1, min_new_tokens=STEPS + 1, do_sample=False
        )
    # generate starts with decoder_start_token_id
    assert check.tokens == want[:, 1 : STEPS + 1].tolist()
    assert check.worst < 1e-4


def test_seq2seq_kv_cache_refuses_short_decoder_examples_without_files(
    hf_root: Path, tmp_path: Path
) -> None:
    model, batch = seq2seq_model("t5", hf_root)
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
