"""Small models for the export tests; also CLI MODEL specs (tests/support/export_models.py:NAME)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import nn


class Tiny(nn.Module):
    """Linear -> LayerNorm (an fp32 island) -> Linear, returning a dict of two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.ln = nn.LayerNorm(16)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.relu(self.ln(self.l1(x)))
        return {"logits": self.l2(h), "hidden": h}


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return Tiny().eval()


def example_inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(4, 8, generator=gen), torch.randn(6, 8, generator=gen)]


def _define_wobble() -> Callable[[torch.Tensor], torch.Tensor]:
    """The operator ``halfprec_tests::wobble``, defined once per process. This file is imported
    as ``support.export_models`` and also run as a CLI MODEL spec in the same process; a second
    ``custom_op`` of one name makes torch destroy the first, and a model still calling the first
    then crashes the test worker (SIGSEGV)."""
    if hasattr(torch.ops.halfprec_tests, "wobble"):
        return cast(Callable[[torch.Tensor], torch.Tensor], torch.ops.halfprec_tests.wobble)

    @torch.library.custom_op("halfprec_tests::wobble", mutates_args=())
    def wobble(x: torch.Tensor) -> torch.Tensor:
        return x + torch.sin(x)

    @wobble.register_fake
    def _wobble_fake(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    return wobble


wobble = _define_wobble()


class Custom(nn.Module):
    """Uses a custom operator that torch.export keeps and ONNX cannot translate."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return wobble(self.lin(x))


def custom() -> nn.Module:
    torch.manual_seed(0)
    return Custom().eval()


class DataDependent(nn.Module):
    """Branches on a tensor value: torch.export cannot capture it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if y.sum() > 0:
            return y
        return -y


class FixedBatch(nn.Module):
    """Hard-codes the batch size of 4: dynamic-batch export fails, static export works."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).reshape(4, 2, 4).sum(1)


class UnbindsImages(nn.Module):
    """Unbinds its image batch into a list, as transformers' LLaVA does with its image
    features: torch.export fixes the image count, while the text batch stays free."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        features = torch.cat(list(self.lin(images)), dim=0)  # (images * 8)
        return self.lin(x) + features.sum()


class ChecksAllTrue(nn.Module):
    """Checks a boolean tensor with ``torch._check_tensor_all`` (``aten._is_all_true``),
    as transformers' ``torch_compilable_check`` does while tracing."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check_tensor_all(x.abs() >= 0)
        return self.lin(x)


class MixedOutputs(nn.Module):
    """Returns a dict holding a tensor and a tuple: TorchScript tracing rejects it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        y = self.lin(x)
        return {"y": y, "pair": (y * 2, y + 1)}
