"""Decoder-only Hugging Face LMs exported with their KV cache as tensors (``--kv-cache``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from halfprec.export import ExportError, export, load_artifact
from halfprec.export.kv_cache import WithPast
from halfprec.io.specs import load_model
from halfprec.io.zoo import token_batch
from support.hf_models import DECODER, build, save
from support.kv_decode import STEPS, decode, onnx_runner
from testbed.decode import decode_against_fp32, left_padded_prompts

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf_kv")


def test_fp32_wrapper_generates_what_transformers_generates(hf_root: Path) -> None:
    # GPT-2's learned absolute positions make left padding visible (RoPE is relative)
    model: Any = load_model(str(save("gpt2", hf_root))).model.eval()
    wrapper = WithPast(model)
    with torch.no_grad():
        check = decode(lambda b: wrapper(**b), model)
        prompt, mask = left_padded_prompts(model.config.vocab_size)
        want = model.generate(prompt, attention_mask=mask, max_new_tokens=STEPS, do_sample=False)
    assert check.tokens == want[:, prompt.shape[1] :].tolist()
    assert check.worst < 1e-4


@pytest.mark.slow
def test_kv_cache_export_decodes_like_fp32(hf_root: Path, tmp_path: Path) -> None:
    loaded = load_model(str(save("llama", hf_root)))
    model: Any = loaded.model
    result = export(model, loaded.example_inputs, tmp_path / "llama.pt2", "fp16", kv_cache=True)
    assert result.passed, result.comparison.problems
    assert result.checked_batches == 4  # split prompt, one-token step, empty past, long past
    layers = model.config.num_hidden_layers
    assert result.info.inputs == (
        "input_ids",
        "attention_mask",
        "position_ids",
        *(f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")),
    )
    assert result.info.outputs[0] == "logits"
    assert "present_key_values.0.value" in result.info.outputs
    # the caller's model is untouched: fp32, its config keeps the cache on
    assert model.config.use_cache is True
    assert all(p.dtype == torch.float32 for p in model.parameters())
    artifact = load_artifact(result.path)
    # fp16 is not fp32, and stays close over the whole decode
    assert 0 < decode(artifact, model).worst < 0.05


def _mistral(root: Path, window: int) -> Path:
    """A tiny Mistral with a sliding window of ``window`` tokens and a 64-token context."""
    torch.manual_seed(0)
    config = transformers.MistralConfig(**DECODER, sliding_window=window)
    path = root / f"mistral_w{window}"
    transformers.MistralForCausalLM(config).save_pretrained(str(path))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("window", "suffix"), [(8, ".pt2"), (40, ".onnx")])
def test_sliding_window_export_decodes_to_the_model_s_full_context(
    hf_root: Path, tmp_path: Path, window: int, suffix: str
) -> None:
    # window 8: shorter than the 32-token examples; window 40: longer (the check's own
    # lengths then stay inside it unless the long step goes past it)
    if suffix == ".onnx":
        pytest.importorskip("onnxscript")
        pytest.importorskip("onnxruntime")
    loaded = load_model(str(_mistral(hf_root, window)))
    model: Any = loaded.model
    assert loaded.example_inputs[0]["input_ids"].shape[1] == 32
    out = tmp_path / f"mistral{suffix}"
    result = export(model, loaded.example_inputs, out, "fp16", kv_cache=True)
    assert result.passed and result.checked_batches == 4  # the 4th: past 63 > window, > 32
    run = load_artifact(out) if suffix == ".pt2" else onnx_runner(out, 1)
    prompt, mask = left_padded_prompts(128)
    steps = model.config.max_position_embeddings - prompt.shape[1]  # to the full context
    check = decode_against_fp32(run, model, prompt, mask, steps)
    assert check.passed and len(check.tokens[0]) == steps, check


def test_kv_cache_refuses_models_without_a_kv_cache_and_short_prompts(
    hf_root: Path, tmp_path: Path
) -> None:
    t5 = load_model(str(save("t5", hf_root))).model  # exported by tests/export/test_seq2seq.py
    with pytest.raises(ExportError, match="encoder-decoder: wrap it with halfprec.export.seq2seq"):
        WithPast(t5)
    gpt2 = load_model(str(save("gpt2", hf_root))).model
    short = {"input_ids": torch.tensor([[1, 2, 3]]), "attention_mask": torch.ones(1, 3)}
    with pytest.raises(ExportError, match="at least 4 tokens, got 3"):
        export(gpt2, short, tmp_path / "g.pt2", kv_cache=True)
    short = {"input_ids": torch.tensor([[1, 2, 3, 4]]), "attention_mask": torch.ones(1, 4)}
    bert = transformers.BertModel(
        transformers.BertConfig(
            num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64
        )
    )
    with pytest.raises(ExportError, match="returned no KV cache"):
        export(bert, short, tmp_path / "b.pt2", kv_cache=True)
    with pytest.raises(ExportError, match="is not one"):
        export(torch.nn.Linear(4, 4), torch.randn(2, 4), tmp_path / "l.pt2", kv_cache=True)
    assert not list(tmp_path.iterdir())


def test_onnx_failure_of_a_kv_cache_file_does_not_offer_static() -> None:
    from halfprec.export.capture import explain_failure

    exc = ValueError("Cannot view a tensor")
    usual = explain_failure("torch.onnx.export", exc)
    assert usual.endswith("; export with --static, or to a .pt2 file (-o NAME.pt2)")
    cached = explain_failure("torch.onnx.export", exc, can_be_static=False)
    assert cached.endswith("; export to a .pt2 file (-o NAME.pt2)")
    assert "--static" not in cached


@pytest.mark.slow
def test_mixtral_kv_cache_onnx_decodes_like_fp32(hf_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    loaded = load_model(str(save("mixtral", hf_root)))
    out = tmp_path / "mixtral.onnx"
    result = export(loaded.model, loaded.example_inputs, out, "fp16", kv_cache=True)
    assert result.passed, result.comparison.problems
    assert any("1 mixture-of-experts layer(s) exported densely" in n for n in result.notes)
    assert 0 < decode(onnx_runner(out, 1), loaded.model).worst < 0.05


@pytest.mark.parametrize(("name", "layers"), [("mamba2", "0"), ("jamba", "0")])
def test_state_space_caches_are_refused_before_any_forward_and_any_file(
    tmp_path: Path, name: str, layers: str
) -> None:
    model = build(name)
    calls: list[str] = []
    model.register_forward_pre_hook(lambda *_: calls.append("forward"))
    batch = token_batch(128, 2, 8)
    message = (
        f"--kv-cache exports key/value caches; {type(model).__name__}'s cache holds "
        f"state-space (conv and SSM) states in layer(s) {layers}, for which transformers' code "
        "takes one path for a prompt and another for a one-token step"
    )
    for fmt in ("pt2", "onnx"):
        with pytest.raises(ExportError, match=re.escape(message)) as refused:
            export(model, batch, tmp_path / f"m.{fmt}", "fp16", kv_cache=True)
        assert "huggingface/transformers/issues/36403" in str(refused.value)
    assert calls == [] and not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemma3-local", "cohere2-local", "qwen2-local"])
@pytest.mark.parametrize("suffix", [".onnx", ".pt2"])
def test_local_attention_exports_its_cache_right_past_the_window(
    name: str, suffix: str, tmp_path: Path
) -> None:
    # sliding windows of 8 tokens; examples of 32 tokens whose second row ends in 10
    # padding tokens (halfprec's token batch), so its last queries see only padding in their
    # window: fully masked attention rows, which torch.onnx's translation got wrong
    from testbed.hf_processors import WINDOW
    from testbed.hf_processors import save as save_with_tokenizer

    if suffix == ".onnx":
        pytest.importorskip("onnxscript")
    model = load_model(str(save_with_tokenizer(name, tmp_path / name))).model
    batch = token_batch(model.config.vocab_size, 2, 4 * WINDOW)
    assert int((batch["attention_mask"][1] == 0).sum()) > WINDOW
    out = tmp_path / f"m{suffix}"
    result = export(model, [batch], out, "fp16", kv_cache=True, runs=0)
    assert result.passed, result.comparison.problems
    # a left-padded prompt longer than the window, decoded to twice the window past it
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(5, 100, (2, WINDOW + 4), generator=gen)
    mask = torch.ones_like(prompt)
    mask[1, :3] = 0
    check = decode_against_fp32(load_artifact(out), model, prompt, mask, 2 * WINDOW)
    assert check.passed, check
