"""Greedy decodes of tiny Hugging Face models through their KV-cache exports, for the export
tests and the CLI's (``tests/export/test_kv_cache.py``, ``test_seq2seq.py``,
``tests/cli/test_export.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from halfprec.io.specs import load_model
from support.hf_models import save
from testbed.decode import (
    DecodeCheck,
    decode_against_fp32,
    decode_seq2seq_against_fp32,
    left_padded_prompts,
)

# tokens decoded by each check
STEPS = 8


def decode(run: Any, model: Any) -> DecodeCheck:
    """STEPS greedy tokens of a left-padded two-prompt batch, each step against fp32."""
    prompt, mask = left_padded_prompts(model.config.vocab_size)
    check = decode_against_fp32(run, model, prompt, mask, STEPS)
    assert check.passed, check
    return check


def seq2seq_model(name: str, root: Path) -> tuple[Any, dict[str, torch.Tensor]]:
    """The fp32 model and an encoder batch: two prompts, one padded (Whisper: features)."""
    loaded = load_model(str(save(name, root)))
    model: Any = loaded.model.eval()
    if name == "whisper":
        return model, {"input_features": loaded.example_inputs[0]["input_features"]}
    ids, mask = left_padded_prompts(model.config.vocab_size)
    return model, {"input_ids": ids, "attention_mask": mask}


def decode_seq2seq(
    encode: Any, run: Any, model: Any, batch: dict[str, torch.Tensor]
) -> DecodeCheck:
    """STEPS greedy tokens of an encoder-decoder, each step against fp32."""
    check = decode_seq2seq_against_fp32(encode, run, model, batch, STEPS)
    assert check.passed, check
    return check


def onnx_runner(path: Path, layers: int) -> Any:
    """A KV-cache ONNX file in onnxruntime, as a function of one WithPast-layout batch."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def run(batch: dict[str, Any]) -> dict[str, Any]:
        feeds = {k: batch[k].numpy() for k in ("input_ids", "attention_mask", "position_ids")}
        for i, layer in enumerate(batch["past_key_values"]):
            for kv, t in layer.items():
                feeds[f"past_key_values.{i}.{kv}"] = t.float().numpy()
        got = dict(zip(names, session.run(None, feeds), strict=True))
        present = tuple(
            {kv: torch.from_numpy(got[f"present_key_values.{i}.{kv}"]) for kv in ("key", "value")}
            for i in range(layers)
        )
        return {"logits": torch.from_numpy(got["logits"]), "present_key_values": present}

    return run
