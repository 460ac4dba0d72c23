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
