"""The real all-MiniLM-L6-v2 weights on real sentences: half must match fp32."""

from __future__ import annotations

import json

import pytest
import torch

from halfprec import convert
from halfprec.compare import compare
from halfprec.io.specs import load_model
from support.cli import run_cli_subprocess


@pytest.fixture(scope="module")
def minilm():  # type: ignore[no-untyped-def]
    return load_model("builtin:minilm")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_minilm_cosine_at_least_0999(minilm, dtype: str) -> None:  # type: ignore[no-untyped-def]
    half = convert(minilm.model, dtype)
    cmp = compare(minilm.model, half, minilm.example_inputs)
    assert cmp.batches == 2  # all 48 sentences
    emb = cmp["sentence_embedding"]
    assert emb.cosine >= 0.999, emb
    assert emb.nonfinite == 0
    assert cmp.passed, cmp.to_json()


def test_minilm_embeddings_still_rank_sentences_alike(minilm) -> None:  # type: ignore[no-untyped-def]
    batch = minilm.example_inputs[0]
    with torch.inference_mode():
        ref = minilm.model(**batch)["sentence_embedding"]
        half = convert(minilm.model, "bf16")(**batch)["sentence_embedding"]
    ref_rank = (ref @ ref.T).argsort(dim=1, descending=True)[:, 1]
    half_rank = (half @ half.T).argsort(dim=1, descending=True)[:, 1]
    assert (ref_rank == half_rank).float().mean() >= 0.9


# a fresh interpreter running the real entry point on real MiniLM (~25 s)
@pytest.mark.slow
def test_halfprec_check_default_main_job() -> None:
    """Smoke test in a fresh interpreter: the README's main job, end to end."""
    proc = run_cli_subprocess("check", "--json", "--runs", "1")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["model"] == "builtin:minilm" and data["passed"]
    assert data["bytes_half"] / data["bytes_fp32"] < 0.51


def _tokenized(texts: list[str]) -> dict[str, torch.Tensor]:
    """A user's call: the MiniLM tokenizer's whole output, token_type_ids included."""
    from transformers import AutoTokenizer

    from halfprec.io.zoo import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    enc = dict(tokenizer(texts, padding=True, return_tensors="pt"))
    assert set(enc) == {"input_ids", "token_type_ids", "attention_mask"}
    return enc


TEXTS = ["A man is eating food.", "Someone is playing a guitar on the stage tonight."]


def test_the_builtin_batches_are_the_tokenizers_whole_output(minilm) -> None:  # type: ignore[no-untyped-def]
    assert set(minilm.example_inputs[0]) == set(_tokenized(TEXTS))


@pytest.mark.slow  # an OpenVINO conversion and an ONNX export of the real model
def test_saved_ir_and_onnx_are_fed_a_tokenizers_output_by_name(minilm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ov = pytest.importorskip("openvino")
    ort = pytest.importorskip("onnxruntime")
    import halfprec
    from halfprec.runtimes import build_runtime

    enc = _tokenized(TEXTS)
    with torch.no_grad():
        want = minilm.model(**enc)["sentence_embedding"]
    built = build_runtime(minilm.model, "openvino", torch.float32, minilm.example_inputs[0])
    assert built.output_names == ("sentence_embedding", "last_hidden_state")
    compiled = ov.Core().compile_model(str(built.save(tmp_path / "minilm.xml")), "CPU")
    result = compiled({k: v.numpy() for k, v in enc.items()})  # by name, whole output
    got = torch.from_numpy(result[compiled.output("sentence_embedding")])
    assert torch.nn.functional.cosine_similarity(got, want).min() > 0.99  # bf16 on AVX512-BF16
    halfprec.export(minilm.model, minilm.example_inputs, tmp_path / "m.onnx", "fp16", runs=0)
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(built.input_names)
    (emb,) = session.run(["sentence_embedding"], {k: v.numpy() for k, v in enc.items()})
    assert torch.nn.functional.cosine_similarity(torch.from_numpy(emb), want).min() > 0.999
