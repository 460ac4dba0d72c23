"""Hazard models: small models, each with one real-world pattern that breaks in fp16.

Each :class:`Hazard` names the module a diagnosis must blame (``culprit``) and whether
``halfprec.convert`` with its defaults already prevents the hazard by construction.
Hand-written norms are named ``ScaleNormalizer`` and ``Standardizer`` on purpose: names
ending in ``Norm`` would be fp32 islands by default (convert's name rule) and hide them.

Used by the test suite and benchmarks/diagnose_zoo.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

__all__ = ["Hazard", "HAZARDS"]

D = 64
VOCAB = 4096


@dataclass(frozen=True)
class Hazard:
    name: str
    pattern: str
    build: Callable[[], tuple[nn.Module, list[Any]]]
    culprit: str
    prevented_by_convert: bool = False


def _seed(n: int) -> torch.Generator:
    torch.manual_seed(n)
    return torch.Generator().manual_seed(n)


def _token_batches(seq: int = 12, batch: int = 4, n: int = 2) -> list[Any]:
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(100 + i)
        ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[1::2, seq // 2 :] = 0  # padded rows
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


# -- attention with mask fills ---------------------------------------------------------------
class MaskedScores(nn.Module):
    """Scaled scores, padding masked with a Python constant, softmax (a separate core)."""

    def __init__(self, fill: float) -> None:
        super().__init__()
        self.fill = fill

    def forward(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        return scores.masked_fill(mask[:, None, :] == 0, self.fill).softmax(-1)


class Attention(nn.Module):
    def __init__(self, fill: float, inline: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.inline, self.fill = inline, fill
        if not inline:
            self.core = MaskedScores(fill)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.inline:
            scores = q @ k.transpose(-1, -2) / math.sqrt(D)
            probs = scores.masked_fill(mask[:, None, :] == 0, self.fill).softmax(-1)
        else:
            probs = self.core(q, k, mask)
        return self.out(probs @ v)


class Block(nn.Module):
    def __init__(self, fill: float, inline: bool) -> None:
        super().__init__()
        self.attn = Attention(fill, inline)
        self.ffn = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
        self.norm1 = nn.LayerNorm(D)
        self.norm2 = nn.LayerNorm(D)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.ffn(x))


class TinyEncoder(nn.Module):
    def __init__(self, fill: float, inline: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Block(fill, inline) for _ in range(2))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, Any]:
        x = self.emb(input_ids)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return {"hidden": x, "pooled": x[:, 0]}


def _fill_1e9() -> tuple[nn.Module, list[Any]]:
    _seed(1)
    return TinyEncoder(-1e9, inline=False).eval(), _token_batches()


def _fill_finfo_min() -> tuple[nn.Module, list[Any]]:
    _seed(2)
    return TinyEncoder(torch.finfo(torch.float32).min, inline=True).eval(), _token_batches()


# -- hand-written norms ----------------------------------------------------------------------
class ScaleNormalizer(nn.Module):
    """Hand-written RMSNorm (LLaMA style) without an fp32 upcast: x**2 overflows fp16."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Standardizer(nn.Module):
    """Hand-written LayerNorm with BERT's eps=1e-12, which is 0 in fp16."""

    def __init__(self, d: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias


def _mlp(d_in: int, width: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, width), nn.GELU(), nn.Linear(width, d_out))


class SensorModel(nn.Module):
    """Unnormalised sensor features -> projection -> hand-written RMSNorm -> MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, D)
        self.norm = ScaleNormalizer(D)
        self.body = _mlp(D, 1024, D)
        self.head = nn.Linear(D, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.norm(self.proj(x))))


def _float_batches(shape: tuple[int, ...], scale: float, n: int = 2) -> list[Any]:
    return [
        (torch.randn(*shape, generator=torch.Generator().manual_seed(200 + i)) * scale,)
        for i in range(n)
    ]


def _rmsnorm() -> tuple[nn.Module, list[Any]]:
    _seed(3)
    return SensorModel().eval(), _float_batches((8, 32), 800.0)


class PaddedFeatures(nn.Module):
    """A hand-written LayerNorm on raw rows, some of them constant padding."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = Standardizer(32)
        self.body = _mlp(32, 1024, D)
        self.head = nn.Linear(D, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.norm(x)))


def _eps() -> tuple[nn.Module, list[Any]]:
    _seed(4)
    batches = _float_batches((6, 5, 32), 1.0)
    for (x,) in batches:
        x[:, -2:] = 0.5  # constant padding rows
    return PaddedFeatures().eval(), batches


# -- large intermediate values -----------------------------------------------------------------
class WideFFN(nn.Module):
    """T5-style feed-forward whose hidden activations exceed 65504 before the down projection."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.ffn = nn.Sequential(nn.Linear(D, 4 * D), nn.ReLU(), nn.Linear(4 * D, D))
        self.body = _mlp(D, 512, D)
        with torch.no_grad():
            cast(nn.Linear, self.ffn[0]).weight.mul_(6e4)
            cast(nn.Linear, self.ffn[2]).weight.mul_(1e-4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.emb(input_ids)
        return self.body(x + self.ffn(x))


def _large() -> tuple[nn.Module, list[Any]]:
    _seed(5)
    return WideFFN().eval(), _token_batches()


# -- hand-written exp softmax ------------------------------------------------------------------
class ExpSoftmax(nn.Module):
    """softmax as exp(x) / sum(exp(x)), without subtracting the max: exp(12) > 65504."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum(-1, keepdim=True)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.body = _mlp(D, 512, D)
        self.logits = nn.Linear(D, 50)
        self.softmax = ExpSoftmax()
        with torch.no_grad():
            self.logits.weight.mul_(120.0)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.softmax(self.logits(self.body(self.emb(input_ids)).mean(1)))


def _exp() -> tuple[nn.Module, list[Any]]:
    _seed(6)
    return Classifier().eval(), _token_batches()


# -- BatchNorm statistics beyond fp16 ----------------------------------------------------------
class Tabular(nn.Module):
    """Raw readings in the thousands: BatchNorm running_var ~ 1e6 > 65504."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(16)
        self.body = _mlp(16, 1024, D)
        self.head = nn.Linear(D, 4)
        with torch.no_grad():
            cast(torch.Tensor, self.bn.running_mean).fill_(5000.0)
            cast(torch.Tensor, self.bn.running_var).fill_(1.0e6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.bn(x)))


def _batchnorm() -> tuple[nn.Module, list[Any]]:
    _seed(7)
    return Tabular().eval(), [(b[0] + 5000.0,) for b in _float_batches((8, 16), 1000.0)]


# -- dtype leaks ---------------------------------------------------------------------------------
class PositionMixer(nn.Module):
    """Adds a position ramp made with torch.arange in forward: fp32, whatever the model is."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ramp = torch.arange(x.shape[1], device=x.device)[None, :, None] / x.shape[1]
        return self.proj(x + ramp)


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.mixer = PositionMixer()
        self.body = _mlp(D, 512, D)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.body(self.mixer(self.emb(input_ids)))


def _no_dtype() -> tuple[nn.Module, list[Any]]:
    _seed(8)
    return Tagger().eval(), _token_batches()


class Rescale(nn.Module):
    """A per-channel scale kept as a plain attribute (not a buffer): .to() never casts it."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.linspace(0.5, 1.5, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.rescale = Rescale()
        self.body = _mlp(D, 512, D)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.body(self.rescale(self.emb(input_ids)))


def _attribute() -> tuple[nn.Module, list[Any]]:
    _seed(9)
    return Scaled().eval(), _token_batches()


# -- integer inputs in a dict --------------------------------------------------------------------
class SinusoidalPositions(nn.Module):
    """sin/cos of integer positions cast to the activation dtype: fp16 rounds 5001 to 5000."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, D, 2) / D))

    def forward(self, positions: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        inv_freq = cast(torch.Tensor, self.inv_freq)
        angles = positions.to(like.dtype)[..., None] * inv_freq.to(like.dtype)
        return torch.cat([angles.sin(), angles.cos()], dim=-1)


class EventModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, D)
        self.pos = SinusoidalPositions()
        self.body = _mlp(D, 1024, D)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        x = self.proj(batch["features"])
        return self.body(x + self.pos(batch["positions"], x))


def _int_dict() -> tuple[nn.Module, list[Any]]:
    _seed(10)
    batches = []
    for i in range(2):
        g = torch.Generator().manual_seed(300 + i)
        feats = torch.randn(4, 10, 16, generator=g)
        pos = torch.randint(2000, 6000, (4, 10), generator=g)
        batches.append(({"features": feats, "positions": pos},))
    return EventModel().eval(), batches


# -- a shared module called in a loop ------------------------------------------------------------
class Recurrent(nn.Module):
    """One norm module shared by every step; step 3 amplifies enough to overflow x**2."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = nn.ModuleList(nn.Linear(D, D) for _ in range(4))
        self.norm = ScaleNormalizer(D)
        self.body = _mlp(D, 1024, D)
        with torch.no_grad():
            cast(nn.Linear, self.steps[2]).weight.mul_(400.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            x = self.norm(x + step(x))
        return self.body(x)


def _loop() -> tuple[nn.Module, list[Any]]:
    _seed(11)
    return Recurrent().eval(), _float_batches((8, D), 1.0)


HAZARDS: dict[str, Hazard] = {
    h.name: h
    for h in (
        Hazard(
            "fill-1e9",
            "masked_fill(mask, -1e9) in an attention core",
            _fill_1e9,
            "layers.0.attn.core",
            prevented_by_convert=True,  # saturating fills
        ),
        Hazard(
            "fill-finfo-min",
            "masked_fill(mask, finfo(float32).min) inline in attention",
            _fill_finfo_min,
            "layers.0.attn",
            prevented_by_convert=True,  # saturating fills
        ),
        Hazard("rmsnorm-overflow", "hand-written RMSNorm: mean(x**2) overflows", _rmsnorm, "norm"),
        Hazard("eps-1e-12", "hand-written LayerNorm, eps=1e-12, constant rows", _eps, "norm"),
        Hazard("large-intermediate", "FFN hidden activations beyond 65504", _large, "ffn.0"),
        Hazard("exp-softmax", "hand-written exp() softmax", _exp, "softmax"),
        Hazard(
            "batchnorm-var",
            "BatchNorm running_var above 65504",
            _batchnorm,
            "bn",
            prevented_by_convert=True,
        ),
        Hazard(
            "tensor-no-dtype",
            "torch.arange(...) / n made in forward without dtype",
            _no_dtype,
            "mixer",
            prevented_by_convert=True,
        ),
        Hazard(
            "fp32-attribute",
            "a plain fp32 tensor attribute",
            _attribute,
            "rescale",
            prevented_by_convert=True,
        ),
        Hazard(
            "int-dict-positions",
            "integer positions in a dict input, cast to fp16",
            _int_dict,
            "pos",
        ),
        Hazard(
            "shared-loop", "one hand-written norm module called 4 times per forward", _loop, "norm"
        ),
    )
}


# -- factories for the command line (MODEL = tests/testbed/hazards.py:fill_model) ----
def fill_model() -> nn.Module:
    return HAZARDS["fill-1e9"].build()[0]


def fill_model_example_inputs() -> list[Any]:
    return HAZARDS["fill-1e9"].build()[1]


def rmsnorm_model() -> nn.Module:
    return HAZARDS["rmsnorm-overflow"].build()[0]


def rmsnorm_model_example_inputs() -> list[Any]:
    return HAZARDS["rmsnorm-overflow"].build()[1]


def dropout_model() -> nn.Module:
    """Dropout left in train mode: fp32 does not reproduce itself."""
    torch.manual_seed(12)
    return nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.5), nn.Linear(64, 4)).train()


def dropout_model_example_inputs() -> list[Any]:
    return _float_batches((8, 16), 1.0)
