"""Decoder-only Hugging Face language models exported with their KV cache as tensors.

A stock causal LM takes and returns a ``DynamicCache`` object, which no exporter puts in
a graph. :class:`WithPast` wraps the model (without changing it) in a module whose cache
is plain tensors, in the layout Optimum's "with past" ONNX files use:

- inputs ``input_ids``, ``attention_mask`` (covering past and new tokens),
  ``position_ids`` of the new tokens (if the model's forward takes them; see
  :func:`position_ids`) and ``past_key_values``: one ``{"key", "value"}`` dict per layer,
  each ``(batch, kv_heads, past_len, head_dim)``; ``past_len`` may be 0 (the prompt);
- outputs ``logits`` and ``present_key_values`` in the same layout as the past, holding
  ``past_len + new`` positions: pass them back as the next step's ``past_key_values``.

:func:`with_past_batches` turns example token batches into batches that exercise the
cache: a split prompt, a one-token decoding step, and a prompt with an empty past. Their
past and new lengths differ, so every length is exported as a symbolic dimension.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch
from halfprec.export.capture import forward_params, named_inputs
from halfprec.export.config import ExportError
from halfprec.io.hf_inputs import max_positions
from halfprec.modules import evaluating

__all__ = [
    "WithPast",
    "as_past",
    "cache_keyword",
    "empty_past",
    "require_tokens",
    "with_past_batches",
    "cache_reference",
    "position_ids",
    "sliding_window",
    "state_layers",
    "max_context",
    "long_length",
    "KV_CACHE_NOTE",
    "MIN_TOKENS",
]

KV_CACHE_NOTE = (
    "KV cache as tensors: inputs past_key_values.N.key/value, outputs "
    "present_key_values.N.key/value (feed them back for the next token)"
)

# the split prompt needs a past and a new part of at least 2 tokens each
MIN_TOKENS = 4

Past = tuple[dict[str, torch.Tensor], ...]


def _config(model: nn.Module) -> Any:
    config = getattr(model, "config", None)
    if config is None or not type(model).__module__.startswith("transformers."):
        raise ExportError(
            f"--kv-cache exports Hugging Face causal language models; {type(model).__name__} "
            "is not one: export it without --kv-cache"
        )
    if getattr(config, "is_encoder_decoder", False):
        raise ExportError(
            f"WithPast covers decoder-only language models; {type(model).__name__} is an "
            "encoder-decoder: wrap it with halfprec.export.seq2seq (export(..., "
            "kv_cache=True) does)"
        )
    return config


def state_layers(config: Any) -> list[int]:
    """The layers whose cache holds state-space (conv and SSM) states, not keys and values
    (Mamba, Mamba2, Jamba's Mamba layers), as transformers' ``DynamicCache(config=...)``
    lays them out; read from the config, with no forward."""
    from transformers import DynamicCache

    try:
        layers = DynamicCache(config=config).layers
    except (TypeError, ValueError, AttributeError, KeyError):  # a config it cannot lay out
        kinds = getattr(config, "layers_block_type", None) or getattr(config, "layer_types", None)
        return [i for i, k in enumerate(kinds or ()) if "mamba" in str(k)]
    return [i for i, layer in enumerate(layers) if hasattr(layer, "recurrent_states")]


# the branch in transformers' Mamba-family mixers that keeps a state-space cache out of one
# exported graph, as reported upstream
_SSM_ISSUES = (
    "https://github.com/huggingface/transformers/issues/36403, "
    "https://github.com/pytorch/pytorch/issues/146835"
)


def _refuse_state_layers(model: nn.Module, config: Any) -> None:
    found = state_layers(config)
    if found:
        shown = ", ".join(map(str, found[:8])) + (" ..." if len(found) > 8 else "")
        raise ExportError(
            f"--kv-cache exports key/value caches; {type(model).__name__}'s cache holds "
            f"state-space (conv and SSM) states in layer(s) {shown}, for which transformers' "
            "code takes one path for a prompt and another for a one-token step (`if ... "
            "seq_len == 1` on the cache), so no one graph does both (" + _SSM_ISSUES + "): "
            "export it without --kv-cache"
        )


def cache_keyword(model: nn.Module) -> str:
    params = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):  # transformers 5 renamed it to "cache"
        if name in params:
            return name
    raise ExportError(
        f"{type(model).__name__}.forward takes no cache (no 'cache' or 'past_key_values' "
        "parameter); export it without --kv-cache"
    )


def as_past(cache: Any) -> Past:
    if cache is None:
        raise ExportError(
            "the model returned no KV cache (it is not a causal language model, or its config "
            "says is_decoder=False); export it without --kv-cache"
        )
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise ExportError(
            f"the model returned a {type(cache).__name__} as its cache, not a DynamicCache; "
            "export it without --kv-cache"
        )
    past = []
    for i, layer in enumerate(layers):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            raise ExportError(
                f"cache layer {i} ({type(layer).__name__}) holds no key/value tensors "
                "(shared or recurrent state); export this model without --kv-cache"
            )
        past.append({"key": keys, "value": values})
    return tuple(past)


def empty_past(past: Past) -> Past:
    """``past`` with 0 positions (same batch, heads and head size): a prompt's past."""
    return tuple({k: t[:, :, :0] for k, t in p.items()} for p in past)


def require_tokens(n: int, name: str) -> None:
    """Refuse example ``name`` shorter than :data:`MIN_TOKENS` (the checks split it)."""
    if n < MIN_TOKENS:
        raise ExportError(
            f"--kv-cache needs example {name} of at least {MIN_TOKENS} tokens, got {n}; "
            "pass longer examples with --inputs"
        )


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions as ``generate`` counts them: real tokens 0, 1, ...; padding 0.

    Left-padded rows start at 0 at their first real token. For a decoding step, the new
    token's position is the last one plus 1.
    """
    return (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)


def _returned_cache(out: Any) -> Past:
    cache = out.get("cache", None)  # transformers 5; "past_key_values" before
    return as_past(cache if cache is not None else out.get("past_key_values", None))


class WithPast(nn.Module):
    """``model`` with its KV cache as plain tensors in and out (see the module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        _refuse_state_layers(model, _config(model))
        self.keyword = cache_keyword(model)
        self.takes_positions = "position_ids" in inspect.signature(model.forward).parameters
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        past_key_values: Past = (),
    ) -> dict[str, Any]:
        from transformers import DynamicCache

        # no config: every layer keeps all its positions (a config would give sliding-window
        # layers a cache that drops old positions, so the cache length would depend on the
        # data: a graph exported at one length breaks past the window); the model's own
        # sliding-window mask still hides the positions outside each layer's window
        cache = DynamicCache(ddp_cache_data=[(p["key"], p["value"]) for p in past_key_values])
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=True,
            **self._positions(position_ids),
            **{self.keyword: cache},
        )
        return {"logits": out["logits"], "present_key_values": _returned_cache(out)}

    def prompt_cache(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Past:
        """The cache after ``input_ids``: the past for the tokens that follow."""
        from transformers import DynamicCache

        with torch.no_grad():
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                use_cache=True,
                **self._positions(position_ids(attention_mask)),
                **{self.keyword: DynamicCache()},  # every position kept, as in forward
            )
        return _returned_cache(out)

    def _positions(self, positions: torch.Tensor | None) -> dict[str, torch.Tensor]:
        return {"position_ids": positions} if self.takes_positions and positions is not None else {}


def _tokens(batch: Batch, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    named = named_inputs(batch, forward_params(model))
    ids = named.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ExportError(
            "--kv-cache needs example batches with input_ids (batch, tokens); pass them with "
            "--inputs or use a model directory with a tokenizer"
        )
    mask = named.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.shape != ids.shape:
        mask = torch.ones_like(ids)
    return ids, mask


def _split(
    wrapper: WithPast, ids: torch.Tensor, mask: torch.Tensor, past_len: int, end: int
) -> dict[str, Any]:
    """Tokens ``[past_len, end)`` as new input, the fp32 cache of the ones before as past."""
    first = max(past_len, 1)  # an empty past takes its shape from a one-token cache
    past = wrapper.prompt_cache(ids[:, :first], mask[:, :first])
    if past_len == 0:
        past = empty_past(past)
    batch = {"input_ids": ids[:, past_len:end], "attention_mask": mask[:, :end]}
    if wrapper.takes_positions:
        batch["position_ids"] = position_ids(mask[:, :end])[:, past_len:]
    return {**batch, "past_key_values": past}


def with_past_batches(wrapper: WithPast, batches: list[Batch]) -> list[Batch]:
    """Three or four cache batches per example batch of ``L`` tokens (``L >= MIN_TOKENS``).

    1. the first ``L // 2`` tokens as the past (from the fp32 model), the rest as new;
    2. ``L - 2`` tokens of past and one new token (a decoding step);
    3. an empty past and all ``L`` tokens (the prompt);
    4. a decoding step whose past is longer than the example (and than the model's
       sliding window, where it has one): :func:`long_length` tokens, the example's
       tokens repeated. Left out where the model's context has no room beyond ``L``.

    Run ``wrapper`` in eval mode; its model must be the fp32 one being exported.
    """
    out: list[Batch] = []
    for batch in batches:
        ids, mask = _tokens(batch, wrapper.model)
        n = ids.shape[1]
        require_tokens(n, "input_ids")
        out += [
            _split(wrapper, ids, mask, p, end) for p, end in ((n // 2, n), (n - 2, n - 1), (0, n))
        ]
        long = long_length(wrapper.model.config, n)
        if long > n:
            reps = -(-long // n)
            ids = torch.cat([ids, ids.repeat(1, reps)[:, : long - n]], dim=1)
            mask = torch.cat([mask, torch.ones_like(ids[:, n:])], dim=1)
            out.append(_split(wrapper, ids, mask, long - 1, long))
    return out


def sliding_window(config: Any) -> int | None:
    """The attention window of the model's sliding-window layers; None if it has none."""
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or window <= 0:
        return None
    if getattr(config, "use_sliding_window", True) is False:
        return None  # Qwen2-style: a window is configured but not used
    types = getattr(config, "layer_types", None)
    if types and "sliding_attention" not in types:
        return None
    return window


def max_context(config: Any) -> int | None:
    """The longest sequence the model's config allows (positions), if it says."""
    return max_positions(config)


def long_length(config: Any, n: int) -> int:
    """The length of the check's long decoding step for examples of ``n`` tokens: past the
    sliding window (when the window is within ``4 * n``, so the check stays cheap) and past
    the examples, within the model's context; ``n`` when there is no room."""
    window = sliding_window(config)
    want = max(2 * n, window + 2 if window is not None and window + 2 <= 4 * n else 0)
    limit = max_context(config)
    return min(want, limit) if limit is not None else want


def cache_reference(model: nn.Module, batches: list[Batch]) -> tuple[WithPast, list[Batch]]:
    """The fp32 ``model`` wrapped with its cache as tensors, and the cache batches made
    from its example token ``batches`` (:func:`with_past_batches`), made in eval mode."""
    wrapper = WithPast(model)
    with evaluating(wrapper):
        return wrapper, with_past_batches(wrapper, batches)
