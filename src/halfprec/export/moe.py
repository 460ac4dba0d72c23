"""Mixture-of-experts layers of Hugging Face models, computed densely for ONNX.

transformers 5 runs the experts of Mixtral, Qwen2-MoE, ... through a dispatch
(``config._experts_implementation``): ``grouped_mm`` calls the custom operator
``transformers::grouped_mm_fallback``, which has no ONNX translation, and ``eager`` loops
over the experts that received tokens (control flow on tensor values, which
``torch.export`` cannot trace). :func:`dense_experts` rebinds, on a converted copy, each
experts module's ``forward`` to a computation with neither: every expert runs on every
token (two batched matmuls over all experts), and the router's top-k weights (zero for
the experts a token was not sent to) pick and weight the results. The output is the
same; the cost is ``num_experts / top_k`` times the experts' FLOPs, which matters for
long prompts and little for one-token decoding steps.

Only per-instance ``forward`` attributes change, as in
:func:`~halfprec.export.hf.static_fp16_clamps`.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

DENSE_EXPERTS_NOTE = (
    "{n} mixture-of-experts layer(s) exported densely (every expert on every token, "
    "weighted by the router's top-k): ONNX has no translation of transformers' expert dispatch"
)


def _is_experts(module: nn.Module) -> bool:
    """A transformers experts module (``@use_experts_implementation``): 3-D expert weights."""
    if not type(module).__module__.startswith("transformers."):
        return False
    up = getattr(module, "gate_up_proj" if getattr(module, "has_gate", False) else "up_proj", None)
    down = getattr(module, "down_proj", None)
    return (
        hasattr(module, "is_transposed")
        and isinstance(up, torch.Tensor)
        and isinstance(down, torch.Tensor)
        and up.dim() == 3
        and down.dim() == 3
    )


def _every_expert(x: torch.Tensor, weight: torch.Tensor, transposed: bool) -> torch.Tensor:
    """``x`` (tokens, in) or (tokens, experts, in) through every expert's ``weight``
    (experts, out, in), or (experts, in, out) if ``transposed``: (tokens, experts, out)."""
    source = "ti" if x.dim() == 2 else "tei"
    return torch.einsum(f"{source},{'eio' if transposed else 'eoi'}->teo", x, weight)


def _dense_forward(
    self: Any,  # a transformers experts module (see _is_experts)
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    experts = self.down_proj.shape[0]
    gated = bool(self.has_gate)
    up = self.gate_up_proj if gated else self.up_proj
    out = _every_expert(hidden_states, up, self.is_transposed)
    if self.has_bias:
        out = out + (self.gate_up_proj_bias if gated else self.up_proj_bias)
    out = self._apply_gate(out) if gated else self.act_fn(out)
    out = _every_expert(out, self.down_proj, self.is_transposed)
    if self.has_bias:
        out = out + self.down_proj_bias
    if getattr(self, "has_post_expert_norm", False):
        out = self.post_expert_norm(out)
    # (tokens, top_k, experts) one-hot of the choices; no scatter (onnxruntime's CPU
    # ScatterElements has no fp16 'add')
    hits = top_k_index.unsqueeze(-1) == torch.arange(experts, device=out.device)
    weights = (hits.to(top_k_weights.dtype) * top_k_weights.unsqueeze(-1)).sum(dim=1)
    chosen = hits.any(dim=1)
    # where, not a product: an expert a token was not sent to may overflow in half
    # precision, and inf * 0 would be NaN
    weighted = torch.where(chosen.unsqueeze(-1), out * weights.unsqueeze(-1).to(out.dtype), 0)
    return weighted.sum(dim=1).to(hidden_states.dtype)


def dense_experts(model: nn.Module) -> int:
    """Rebind, on ``model`` (a converted copy), every experts module to the dense
    computation; returns how many."""
    count = 0
    for module in model.modules():
        if _is_experts(module):
            module.forward = types.MethodType(_dense_forward, module)  # type: ignore[method-assign]
            count += 1
    return count
