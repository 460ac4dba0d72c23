"""``halfprec check --artifact`` as a library call: an exported file against its fp32 model.

:func:`check_artifact` loads the file, builds the fp32 reference the file was exported
from (with its KV cache as tensors, or the encoder or decoder of an encoder-decoder, as
the file's metadata says), runs both on the example batches and compares them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from halfprec.batch import Batch
from halfprec.compare import Comparison, Tolerance, run_reference
from halfprec.convert.core import Recipe
from halfprec.export.artifact import Artifact, load_artifact, verify_artifact
from halfprec.export.seq2seq import kv_reference
from halfprec.modules import evaluating


@dataclass(frozen=True)
class ArtifactCheck:
    """The file, its fp32 model's name, and how the file compares with that model."""

    artifact: Artifact
    model: str
    comparison: Comparison
    skipped_batches: int

    @property
    def passed(self) -> bool:
        return self.comparison.passed

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact": str(self.artifact.path),
            "info": self.artifact.info.__dict__,
            "model": self.model,
            "skipped_batches": self.skipped_batches,
            **self.comparison.to_json(),
        }


def check_artifact(
    path: str | os.PathLike[str],
    model: nn.Module,
    batches: list[Batch],
    recipe: Recipe | None = None,
    *,
    tolerance: Tolerance | None = None,
    name: str = "",
) -> ArtifactCheck:
    """Compare the file at ``path`` (``.pt2``, ``.ts``/``.pt``, ``.onnx`` from
    :func:`~halfprec.export.export`) with the fp32 ``model`` on ``batches``, judged by
    ``tolerance`` where given, else the recipe's, with the file's dtype defaults filled
    in (:meth:`Recipe.settle`). ``model`` is run in eval mode and left as it was."""
    artifact = load_artifact(Path(path))
    judge = Recipe.of(recipe).settle(artifact.device, tolerance).judge(artifact.dtype)
    with evaluating(model):
        reference: nn.Module = model
        if artifact.info.kv_cache:
            reference, batches = kv_reference(model, batches, artifact.info)
        outputs = run_reference(reference, batches)
    check = verify_artifact(artifact, batches, outputs, tolerance=judge)
    return ArtifactCheck(
        artifact=artifact,
        model=name or type(model).__name__,
        comparison=check.comparison,
        skipped_batches=check.skipped_batches,
    )
