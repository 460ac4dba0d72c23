"""Greedy-generation agreement of a half causal LM with its fp32 reference.

Logits cosine says little about what a language-model user sees: whether the generated
text changes. :func:`agreement` decodes ``new_tokens`` greedy tokens with the fp32 model
from each prompt, then runs the half model once on that same sequence (teacher forcing):

- ``first_divergence[i]``: the first step at which the half model would pick another token
  than fp32 (``None``: none within ``new_tokens``). Up to that step both models see the same
  context, so this is exactly where free-running half greedy decoding leaves fp32's text.
- ``agreement``: the fraction of steps, over all prompts, at which the half model's choice
  given fp32's context is fp32's token.
- ``mean_logprob_diff``: mean ``|log p_fp32(t) - log p_half(t)|`` over fp32's tokens ``t``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch
from halfprec.errors import InputsError
from halfprec.fp32 import exact_fp32


@dataclass(frozen=True)
class Generation:
    """How greedy decoding in half precision agrees with fp32 (see the module docs)."""

    new_tokens: int
    agreement: float
    first_divergence: tuple[int | None, ...]
    mean_logprob_diff: float
    prompt_lengths: tuple[int, ...] = field(default_factory=tuple)

    @property
    def diverged(self) -> int:
        return sum(d is not None for d in self.first_divergence)

    def to_json(self) -> dict[str, Any]:
        return {
            "new_tokens": self.new_tokens,
            "prompts": len(self.first_divergence),
            "agreement": self.agreement,
            "first_divergence": list(self.first_divergence),
            "mean_logprob_diff": self.mean_logprob_diff,
        }


def prompts_from_batches(
    batches: list[Batch], count: int = 4, max_length: int = 16
) -> list[torch.Tensor]:
    """Up to ``count`` prompts (1-D token ids) from batches holding ``input_ids``.

    Each row is cut to its attention mask (right padding) and to ``max_length`` tokens.
    """
    prompts: list[torch.Tensor] = []
    for batch in batches:
        ids = batch.get("input_ids") if isinstance(batch, dict) else None
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            continue
        mask = batch.get("attention_mask")
        for row in range(ids.shape[0]):
            length = int(mask[row].sum()) if isinstance(mask, torch.Tensor) else ids.shape[1]
            if length > 0:
                prompts.append(ids[row, : min(length, max_length)])
            if len(prompts) == count:
                return prompts
    if not prompts:
        raise InputsError(
            "--generate needs token prompts: example inputs with an 'input_ids' tensor "
            "[batch, sequence]; pass --inputs FILE holding input_ids"
        )
    return prompts


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    kwargs: dict[str, Any] = {"input_ids": ids}
    if "use_cache" in inspect.signature(model.forward).parameters:
        kwargs["use_cache"] = False
    out = model(**kwargs)
    logits = getattr(out, "logits", None)
    if logits is None and isinstance(out, (tuple, list)) and out:
        logits = out[0]
    if logits is None and isinstance(out, torch.Tensor):
        logits = out
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.shape[1] != ids.shape[1]:
        raise InputsError(
            f"--generate needs a causal language model returning logits [batch, sequence, "
            f"vocab] (a ...ForCausalLM); {type(model).__name__} does not"
        )
    return logits.float()


_POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "n_ctx")


def max_positions(model: nn.Module) -> int | None:
    """The longest sequence ``model`` takes, from its Hugging Face config
    (``max_position_embeddings``, ``n_positions``, ...), or None when it does not say."""
    config = getattr(model, "config", None)
    for name in _POSITION_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_room(model: nn.Module, prompts: list[torch.Tensor], new_tokens: int) -> None:
    """Refuse (:class:`InputsError`, before any decoding) prompts that ``new_tokens`` more
    tokens would make longer than ``model`` takes (:func:`max_positions`)."""
    limit = max_positions(model)
    prompt = max((p.numel() for p in prompts), default=0)
    if limit is not None and prompt + new_tokens > limit:
        room = limit - prompt
        fix = f"use --generate {room} or fewer" if room > 0 else "give shorter prompts"
        raise InputsError(
            f"--generate {new_tokens} after a prompt of {prompt} tokens needs "
            f"{prompt + new_tokens} positions, but {type(model).__name__} takes {limit}; {fix}"
        )


def agreement(
    model: nn.Module, half: nn.Module, prompts: list[torch.Tensor], new_tokens: int
) -> Generation:
    """Greedy-decode ``new_tokens`` tokens with ``model`` from each prompt; score ``half``.

    ``prompts``: 1-D token-id tensors on the models' device. Neither model is changed.
    """
    if new_tokens < 1:
        raise ValueError(f"new_tokens={new_tokens}: generate at least 1 token")
    if not prompts:
        raise ValueError("agreement needs at least one prompt")
    check_room(model, prompts, new_tokens)
    matches = 0
    diffs: list[torch.Tensor] = []
    divergence: list[int | None] = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = prompt.reshape(1, -1)
            start = ids.shape[1]
            with exact_fp32():  # the fp32 reference: IEEE fp32 whatever the process set
                for _ in range(new_tokens):
                    step = _logits(model, ids)[:, -1].argmax(-1, keepdim=True)
                    ids = torch.cat([ids, step.to(ids.dtype)], dim=1)
                fp32_logp = torch.log_softmax(_logits(model, ids)[0, start - 1 : -1], -1)
            half_logp = torch.log_softmax(_logits(half, ids)[0, start - 1 : -1], -1)
            chosen = ids[0, start:]
            same = half_logp.argmax(-1) == chosen
            matches += int(same.sum())
            wrong = (~same).nonzero()
            divergence.append(int(wrong[0, 0]) if wrong.numel() else None)
            picked = chosen.unsqueeze(-1)
            diffs.append(
                (fp32_logp.gather(-1, picked) - half_logp.gather(-1, picked)).abs().flatten()
            )
    return Generation(
        new_tokens=new_tokens,
        agreement=matches / (new_tokens * len(prompts)),
        first_divergence=tuple(divergence),
        mean_logprob_diff=float(torch.cat(diffs).mean()),
        prompt_lengths=tuple(int(p.numel()) for p in prompts),
    )
