"""Greedy decoding through a KV-cache export, step by step against fp32 without a cache.

Shared by the tests and ``benchmarks/kv_cache.py``. ``run`` is anything that takes one
batch of the :class:`~halfprec.export.kv_cache.WithPast` layout and returns its outputs: an
artifact from :func:`~halfprec.export.load_artifact`, a ``WithPast`` module, or a function
around an onnxruntime session. Outputs may be nested or flat (an ONNX artifact returns
``present_key_values.N.key``...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.export.kv_cache import WithPast, empty_past, position_ids

__all__ = [
    "DecodeCheck",
    "decode_against_fp32",
    "decode_seq2seq_against_fp32",
    "left_padded_prompts",
]


@dataclass
class DecodeCheck:
    """Tokens per row, the largest logit difference from fp32, and the steps where the
    argmax differed although fp32's margin between its two best tokens was wider than
    twice that step's difference (a real disagreement, not a near tie)."""

    tokens: list[list[int]]
    worst: float = 0.0
    disagreements: list[tuple[int, int]] = field(default_factory=list)  # (step, row)
    nonfinite: bool = False  # some step's logits were inf or NaN

    @property
    def passed(self) -> bool:
        return not self.disagreements and not self.nonfinite

    def add(self, step: int, logits: torch.Tensor, want: torch.Tensor) -> bool:
        """Record one step's last-position ``logits`` against fp32's ``want`` and its greedy
        tokens; False (stop decoding) when the logits are not finite."""
        diff = float((logits - want).abs().max())
        if not math.isfinite(diff):
            self.nonfinite = True
            return False
        self.worst = max(self.worst, diff)
        for row in range(logits.shape[0]):
            top2 = want[row].topk(2).values
            margin_clear = float(top2[0] - top2[1]) > 2 * diff
            if margin_clear and int(logits[row].argmax()) != int(want[row].argmax()):
                self.disagreements.append((step, row))
        for row, token in enumerate(logits.argmax(-1).tolist()):
            self.tokens[row].append(token)
        return True


def left_padded_prompts(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts of 6 and 4 tokens, the shorter one left-padded as batched generation pads."""
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [0, 0, 11, 12, 13, 14]]) % vocab
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    return ids, mask


def _empty_past(model: nn.Module, rows: int) -> tuple[dict[str, torch.Tensor], ...]:
    one = torch.zeros(rows, 1, dtype=torch.long)
    past = WithPast(model).prompt_cache(one, torch.ones_like(one))
    return empty_past(past)


def _layers(out: dict[str, Any], name: str) -> tuple[dict[str, torch.Tensor], ...]:
    """The cache ``name`` of ``out`` as a tuple of per-layer dicts: a ``.pt2`` returns that
    tuple, an ONNX artifact dicts keyed ``"0"``, ``"1"``, ... (its outputs, named by path,
    unflattened), and onnxruntime itself flat names (``present_key_values.0.key``)."""
    if name in out:
        layers = out[name]
        return (
            tuple(layers[str(i)] for i in range(len(layers)))
            if isinstance(layers, Mapping)
            else tuple(layers)
        )
    count = sum(1 for k in out if k.startswith(f"{name}.") and k.endswith(".key"))
    return tuple({kv: out[f"{name}.{i}.{kv}"] for kv in ("key", "value")} for i in range(count))


def _present(out: dict[str, Any]) -> tuple[dict[str, torch.Tensor], ...]:
    return _layers(out, "present_key_values")


def _flat_or_nested(out: dict[str, Any], name: str) -> dict[str, Any]:
    return {**out, name: _layers(out, name)}


def decode_against_fp32(
    run: Callable[[dict[str, Any]], Any],
    model: nn.Module,
    prompt: torch.Tensor,
    mask: torch.Tensor,
    steps: int,
) -> DecodeCheck:
    """Greedy-decode ``steps`` tokens through ``run``, feeding its cache back.

    Each step's last-position logits are compared with the fp32 ``model`` run on the whole
    sequence so far, without a cache. ``position_ids`` are passed when the model takes them.
    """
    takes_positions = WithPast(model).takes_positions
    ids, seq, past = prompt, prompt, _empty_past(model, prompt.shape[0])
    positions = position_ids(mask)
    check = DecodeCheck([[] for _ in range(prompt.shape[0])])
    for step in range(steps):
        batch: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if takes_positions:
            batch["position_ids"] = positions
        out = run({**batch, "past_key_values": past})
        logits = out["logits"][:, -1].float()
        extra = {"position_ids": position_ids(mask)} if takes_positions else {}
        with torch.no_grad():
            want = model(input_ids=seq, attention_mask=mask, **extra)["logits"][:, -1].float()
        if not check.add(step, logits, want):
            break
        ids = logits.argmax(-1, keepdim=True)
        past = _present(out)
        positions = positions[:, -1:] + 1
        mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
        seq = torch.cat([seq, ids], dim=1)
    return check


def decode_seq2seq_against_fp32(
    encode: Callable[[dict[str, Any]], Any],
    run: Callable[[dict[str, Any]], Any],
    model: nn.Module,
    encoder_batch: dict[str, torch.Tensor],
    steps: int,
) -> DecodeCheck:
    """Greedy-decode ``steps`` tokens of an encoder-decoder exported as two files
    (:mod:`halfprec.export.seq2seq`): ``encode`` once on ``encoder_batch``, then ``run``
    step by step from ``decoder_start_token_id``, feeding ``present_key_values`` back.

    Each step's logits are compared with the fp32 ``model`` run on the same encoder inputs
    and the whole decoder sequence so far, without a cache.
    """
    encoded = _flat_or_nested(encode(encoder_batch), "cross_key_values")
    fixed = {"encoder_hidden_states": encoded["encoder_hidden_states"]}
    if "attention_mask" in encoder_batch:
        fixed["attention_mask"] = encoder_batch["attention_mask"]
    rows = fixed["encoder_hidden_states"].shape[0]
    start = int(getattr(model.config, "decoder_start_token_id", None) or 0)
    ids = seq = torch.full((rows, 1), start, dtype=torch.long)
    # the empty self-attention past: the cross K/V's heads and head size, 0 positions
    past = empty_past(encoded["cross_key_values"])
    check = DecodeCheck([[] for _ in range(rows)])
    for step in range(steps):
        out = run(
            {
                "decoder_input_ids": ids,
                **fixed,
                "past_key_values": past,
                "cross_key_values": encoded["cross_key_values"],
            }
        )
        with torch.no_grad():
            want = model(**encoder_batch, decoder_input_ids=seq, use_cache=False)["logits"]
        if not check.add(step, out["logits"][:, -1].float(), want[:, -1].float()):
            break
        ids = out["logits"][:, -1:].argmax(-1)
        past = _present(out)
        seq = torch.cat([seq, ids], dim=1)
    return check
