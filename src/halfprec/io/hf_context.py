"""What every builder of Hugging Face example inputs reads (:mod:`halfprec.io.hf_inputs`):
the model, its directory and config, the call's one batch size, and the directory's own
tokenizer and processors, loaded as data (no remote code)."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.errors import ModelSpecError
from halfprec.modules import first_line

ROWS = 2  # rows of every input of a model that reads more than text: both photos
_PROCESSOR_FILE = "preprocessor_config.json"
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model")

_TARGETS = frozenset({"labels"})


@dataclass
class HfContext:
    """What every builder reads: the model, its directory and config, the one batch size of
    the call, notes to add and what was built from what."""

    model: nn.Module
    path: Path
    tf: Any
    params: dict[str, inspect.Parameter]
    notes: list[str] = field(default_factory=list)
    rows: int = ROWS
    built: list[str] = field(default_factory=list)

    @property
    def config(self) -> Any:
        return self.model.config

    def sub(self, name: str) -> Any:
        """The ``vision_config``/``text_config`` of a composite model, else the config."""
        return getattr(self.config, name, None) or self.config

    def saved(self, name: str) -> dict[str, Any]:
        """A JSON object the directory holds (``generation_config.json``, ...), else {}:
        read as data, never run."""
        try:
            found = json.loads((self.path / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    def has_tokenizer(self) -> bool:
        return any((self.path / f).is_file() for f in _TOKENIZER_FILES)

    def taken(self, encoded: Any, names: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The tensors of a processor's output that ``forward`` takes (of ``names``), less
        training targets: a processor may add ``labels`` (PaliGemma's always does), which
        would make the forward compute a loss, and a model card's inference passes none."""
        return {
            k: v
            for k, v in dict(encoded).items()
            if k in self.params
            and k not in _TARGETS
            and isinstance(v, torch.Tensor)
            and (names is None or k in names)
        }


def load_tokenizer(ctx: HfContext) -> Any:
    """The directory's tokenizer; one without a pad token pads with its eos token, as
    ``transformers.pipeline`` does (and a note says so)."""
    try:
        tokenizer = ctx.tf.AutoTokenizer.from_pretrained(str(ctx.path), trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelSpecError(
            f"cannot load the tokenizer in {ctx.path} ({first_line(exc)}); check its tokenizer "
            "files against the installed transformers, or pass --inputs FILE"
        ) from None
    pad_with_eos(ctx, tokenizer)
    return tokenizer


def pad_with_eos(ctx: HfContext, tokenizer: Any) -> None:
    if tokenizer.pad_token is not None:
        return
    if tokenizer.eos_token is None:
        raise ModelSpecError(
            f"the tokenizer in {ctx.path} has neither a pad token nor an eos token to pad "
            "with; set pad_token in its tokenizer_config.json, or pass --inputs FILE"
        )
    tokenizer.pad_token = tokenizer.eos_token
    ctx.notes.append(
        f"the tokenizer in {ctx.path} has no pad token; padding with its eos token "
        f"{tokenizer.eos_token!r} (id {tokenizer.eos_token_id}), as transformers.pipeline does"
    )


def saved_processor(ctx: HfContext, kind: str) -> bool:
    """Whether the directory holds a ``kind`` ("image_processor", "feature_extractor"):
    its own ``preprocessor_config.json``, or inside ``processor_config.json`` where a
    processor's ``save_pretrained`` puts it (transformers 5)."""
    return (ctx.path / _PROCESSOR_FILE).is_file() or kind in ctx.saved("processor_config.json")


def joint_processor(ctx: HfContext, other: str) -> Any:
    """The directory's processor that takes text and, through its ``other``
    ("image_processor", "feature_extractor"), images or audio; else None."""
    try:
        processor = ctx.tf.AutoProcessor.from_pretrained(str(ctx.path), trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if hasattr(processor, "tokenizer") and hasattr(processor, other):
        return processor
    return None
