"""halfprec.audit follows a tensor made without dtype: a leak where its fp32 values meet a
half tensor or are returned, none where it only becomes booleans or the model's dtype."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from halfprec import audit


class _Masked(nn.Module):
    """Attention-like scores with a mask made in forward when the caller gives none."""

    def __init__(self, use: str) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.use = use

    def forward(self, x: torch.Tensor) -> Any:
        h = self.proj(x)
        mask = torch.ones(h.shape[0], h.shape[1], device=h.device)  # made: the leak's line
        if self.use == "bool":  # a mask that only becomes booleans
            keep = mask.float().bool()
            return h.masked_fill(~keep, torch.finfo(h.dtype).min).softmax(-1)
        if self.use == "cast":  # cast into the model's dtype before it meets half values
            return h * (1.0 - mask).to(h.dtype)
        if self.use == "meets":  # fp32 values computed from it meet half ones
            return h + (1.0 - mask) * -1e4
        if self.use == "in_place":  # half in place: computed against fp32 values
            return h.mul_(mask[:, :1] * 2)
        if self.use == "returned":
            return h, mask * 2
        raise ValueError(self.use)


_MADE = "mask = torch.ones("


@pytest.mark.parametrize("use", ["bool", "cast"])
def test_a_mask_made_without_dtype_that_never_meets_half_is_no_leak(use: str) -> None:
    for dtype in ("fp16", "bf16"):
        report = audit(_Masked(use), torch.randn(2, 8), dtype)
        assert report.leaks == [], [leak.to_json() for leak in report.leaks]


@pytest.mark.parametrize(
    ("use", "how"),
    [
        ("meets", "Tensor.add mixes it with fp16 values"),
        ("in_place", "Tensor.mul_ mixes it with fp16 values"),
        ("returned", "the model returns it"),
    ],
)
def test_a_mask_whose_fp32_values_meet_half_is_reported_where_it_was_made(
    use: str, how: str
) -> None:
    report = audit(_Masked(use), torch.randn(2, 8), "fp16")
    [leak] = report.leaks
    assert (leak.kind, leak.op, leak.count) == ("factory", "torch.ones", 1)
    assert leak.code.startswith(_MADE)
    assert "made fp32 without dtype in a fp16 model" in leak.message and how in leak.message
    assert "x.new_ones(...)" in leak.suggestion
    assert not report.clean


def test_each_tensor_made_counts_once_however_often_it_meets_half() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(2):
                bias = torch.zeros(8)
                x = self.proj(x) + bias
                x = x * bias.exp()  # the same tensor meets half again
            return x

    [leak] = audit(Twice(), torch.randn(2, 8), "fp16").leaks
    assert (leak.kind, leak.op, leak.count) == ("factory", "torch.zeros", 2)


_NS = (("layers", 1), ("attention_heads", 2))
_LAYER = {"d_model": 32, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}
_LAYER |= {f"{side}_{k}": n for side in ("encoder", "decoder") for k, n in _NS}


def _deberta_v2() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    import transformers as tf

    sizes = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2}
    config = tf.DebertaV2Config(vocab_size=128, num_hidden_layers=1, **sizes)
    return tf.DebertaV2Model(config), {"input_ids": torch.randint(3, 100, (2, 10))}


def _marian() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    import transformers as tf

    config = tf.MarianConfig(vocab_size=128, pad_token_id=1, decoder_start_token_id=0, **_LAYER)
    ids = torch.randint(3, 100, (2, 10))
    return tf.MarianModel(config), {"input_ids": ids, "decoder_input_ids": ids[:, :4]}


def _detr() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    import transformers as tf

    backbone = tf.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1] * 4)
    config = tf.DetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=backbone.to_dict() | {"out_features": ["stage4"]},
        num_queries=5,
        **_LAYER,
    )
    return tf.DetrModel(config), {"pixel_values": torch.randn(1, 3, 64, 64)}


@pytest.mark.parametrize("build", [_deberta_v2, _marian, _detr])
def test_stock_transformers_that_make_a_mask_when_none_is_given_audit_clean(build: Any) -> None:
    """DeBERTa-v2 and Marian make ``torch.ones`` attention masks, DETR a pixel mask, when
    the caller passes none; each only becomes booleans or the model's dtype."""
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    model, batch = build()
    report = audit(model.eval(), batch, "fp16")
    assert report.leaks == [], [leak.to_json() for leak in report.leaks]
    assert report.ops > 50
