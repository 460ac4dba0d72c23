"""Greedy-generation agreement of half causal LMs with fp32."""

from __future__ import annotations

import copy

import pytest
import torch

from halfprec.convert import convert
from halfprec.errors import InputsError
from halfprec.generate import agreement, prompts_from_batches

pytest.importorskip("transformers")


def _gpt2(seed: int = 0):  # type: ignore[no-untyped-def]
    import transformers as tf

    torch.manual_seed(seed)
    return tf.GPT2LMHeadModel(
        tf.GPT2Config(
            n_layer=2,
            n_embd=32,
            n_head=2,
            n_positions=64,
            vocab_size=128,
            tie_word_embeddings=False,
        )
    ).eval()


def test_identical_model_agrees_everywhere() -> None:
    model = _gpt2()
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([5, 6])]
    gen = agreement(model, copy.deepcopy(model), prompts, 5)
    assert gen.agreement == 1.0
    assert gen.first_divergence == (None, None)
    assert gen.mean_logprob_diff == pytest.approx(0.0, abs=1e-6)
    assert gen.to_json()["new_tokens"] == 5


def test_first_divergence_is_where_greedy_decoding_leaves_fp32() -> None:
    model = _gpt2()
    other = _gpt2(seed=1)  # another random model: it disagrees somewhere
    prompt = torch.tensor([1, 2, 3, 4])
    gen = agreement(model, other, [prompt], 6)
    ids = prompt.reshape(1, -1)
    a = b = ids
    with torch.no_grad():
        for _ in range(6):
            a = torch.cat([a, model(input_ids=a).logits[:, -1:].argmax(-1)], 1)
            b = torch.cat([b, other(input_ids=b).logits[:, -1:].argmax(-1)], 1)
    differs = (a[0, 4:] != b[0, 4:]).nonzero()
    expected = int(differs[0, 0]) if differs.numel() else None
    assert gen.first_divergence == (expected,)
    assert expected is not None and gen.agreement < 1.0


def test_half_gpt2_agreement_matches_a_hand_computed_control() -> None:
    # the control: transformers' own greedy decoding for fp32's tokens, then the half model
    # scored on that sequence (teacher forcing), counted and averaged here by hand
    model = _gpt2()
    half = convert(model, "bf16")
    prompts = [torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9, 2, 6])]
    gen = agreement(model, half, prompts, 4)
    matches, diffs, first = 0, [], []
    with torch.no_grad():
        for prompt in prompts:
            ids = model.generate(
                prompt.reshape(1, -1), max_new_tokens=4, do_sample=False, pad_token_id=0
            )
            start = prompt.numel()
            fp32 = torch.log_softmax(model(input_ids=ids).logits[0, start - 1 : -1].float(), -1)
            ours = torch.log_softmax(half(input_ids=ids).logits[0, start - 1 : -1].float(), -1)
            chosen = ids[0, start:]
            same = (ours.argmax(-1) == chosen).tolist()
            matches += sum(same)
            first.append(same.index(False) if False in same else None)
            diffs += (fp32 - ours).gather(-1, chosen[:, None]).abs().flatten().tolist()
    assert gen.agreement == matches / 8
    assert gen.first_divergence == tuple(first)
    assert gen.mean_logprob_diff == pytest.approx(sum(diffs) / len(diffs), rel=1e-5)
    assert gen.mean_logprob_diff > 0  # bf16 changes the log-probabilities a little
    assert gen.prompt_lengths == (5, 3)


def test_prompts_follow_the_attention_mask() -> None:
    batch = {
        "input_ids": torch.arange(12).reshape(2, 6),
        "attention_mask": torch.tensor([[1] * 6, [1, 1, 0, 0, 0, 0]]),
    }
    prompts = prompts_from_batches([batch])
    assert [p.tolist() for p in prompts] == [list(range(6)), [6, 7]]
    with pytest.raises(InputsError, match="input_ids"):
        prompts_from_batches([torch.zeros(2, 3)])


def test_non_causal_model_is_refused() -> None:
    model = torch.nn.Linear(3, 3)

    class Wrap(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return model(input_ids.float().unsqueeze(-1).expand(-1, -1, 3))[:, 0]

    with pytest.raises(InputsError, match="causal language model"):
        agreement(Wrap(), Wrap(), [torch.tensor([1, 2])], 2)
