"""Load any halfprec artifact (``.pt2``, ``.ts``/``.pt``, ``.onnx``) and check it against fp32.

An :class:`Artifact` is called like the model: with one batch in halfprec's convention
(tuple, dict, :class:`~halfprec.batch.Args` or tensor). ONNX outputs come back as a dict
keyed by the model's output paths, so :func:`~halfprec.compare.compare_outputs` lines them
up with the PyTorch outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from halfprec.batch import Batch
from halfprec.compare import Comparison, Tolerance, compare_outputs
from halfprec.dtypes import parse_dtype
from halfprec.errors import clip
from halfprec.export.capture import named_inputs
from halfprec.export.config import ExportError, ExportFormat, RuntimeFailure, format_for_path
from halfprec.export.info import ArtifactInfo
from halfprec.modules import first_line
from halfprec.tree import flatten, map_tensors, unflatten


@dataclass
class Artifact:
    """An exported file, callable on batches; ``info`` is the metadata halfprec stored."""

    path: Path
    info: ArtifactInfo
    run_named: Callable[[dict[str, Any]], Any]
    device: torch.device = torch.device("cpu")
    runtime: str = "torch"  # ONNX: "onnxruntime <provider>", the provider that runs it

    @property
    def dtype(self) -> torch.dtype:
        return parse_dtype(self.info.dtype, allow_fp32=True)

    def prepare(self, batch: Batch) -> dict[str, Any]:
        """``batch`` as the artifact's keyword inputs: on its device, floats in its IO dtype."""
        named = named_inputs(batch, self.info.params)
        io_dtype = parse_dtype(self.info.io_dtype, allow_fp32=True)

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(self.device, io_dtype if t.is_floating_point() else t.dtype)

        return map_tensors(move, named)

    def accepts(self, batch: Batch) -> bool:
        """False when the artifact has fixed shapes and ``batch`` has other ones."""
        if self.info.static_shapes is None:
            return True
        shapes = {k: tuple(t.shape) for k, t in flatten(self.prepare(batch)).items()}
        return all(shapes.get(k) == v for k, v in self.info.static_shapes.items())

    def __call__(self, batch: Batch) -> Any:
        with torch.no_grad():
            return self.run_named(self.prepare(batch))


def load_artifact(
    path: str | Path,
    *,
    format: ExportFormat | None = None,
    device: torch.device | str = "cpu",
) -> Artifact:
    """Open an artifact written by :func:`halfprec.export`; the format follows the suffix
    unless ``format`` is given.

    A ``.pt2`` runs on the device it was exported on; TorchScript on CPU. ONNX runs on
    onnxruntime's CUDA provider when ``device`` is a CUDA device and onnxruntime has that
    provider (:func:`~halfprec.export.onnx.check_providers`), else on its CPU provider;
    ``Artifact.runtime`` names the one that runs it. Inputs are moved where they go by
    :meth:`Artifact.prepare`.
    """
    p = Path(path)
    fmt = format if format is not None else format_for_path(p)
    if not p.is_file():
        raise ExportError(f"artifact {p} not found; check the path or run halfprec export")
    if fmt == "exported-program":
        from halfprec.export.exported_program import load_exported_program

        module, info = load_exported_program(p)
        first = next(iter(module.state_dict().values()), None)
        where = first.device if first is not None else torch.device("cpu")
        return Artifact(p, info, lambda named: module(**named), where)
    if fmt == "torchscript":
        from halfprec.export.torchscript import load_torchscript

        script, info = load_torchscript(p)
        return Artifact(p, info, lambda named: script(**named))
    from halfprec.export.onnx import check_providers, load_onnx

    session, info = load_onnx(p, providers=check_providers(device))
    return Artifact(
        p,
        info,
        lambda named: unflatten(session.run(session.feeds(flatten(named)))),
        runtime=f"onnxruntime {session.providers[0]}",
    )


@dataclass
class Verification:
    """An artifact's outputs on the example batches, compared with the fp32 model's."""

    comparison: Comparison
    outputs: list[Any]
    checked_batches: list[int]
    skipped_batches: int
    runtime: str = "torch"  # the artifact's: ONNX names the onnxruntime provider


def verify_artifact(
    artifact: Artifact,
    batches: list[Batch],
    reference_outputs: list[Any],
    *,
    tolerance: Tolerance | None = None,
) -> Verification:
    """Run ``artifact`` on every batch it accepts and compare with the fp32 outputs."""
    picked = [i for i, b in enumerate(batches) if artifact.accepts(b)]
    dtype = artifact.dtype
    if not picked:
        shapes = artifact.info.static_shapes
        cmp = Comparison([], tolerance or Tolerance.for_dtype(dtype), 0, dtype)
        cmp.problems.append(
            f"the artifact has fixed input shapes {shapes} and no example batch has them; "
            "export with dynamic shapes or pass inputs of those shapes"
        )
        return Verification(cmp, [], [], len(batches), artifact.runtime)
    try:
        outputs = [artifact(batches[i]) for i in picked]
    except RuntimeFailure as exc:
        raise ExportError(
            f"{artifact.path} fails in its runtime ({clip(str(exc), 200)}); keep the module "
            "with that op in fp32 (--keep-fp32), or export to a .pt2 file (-o NAME.pt2)"
        ) from None
    except Exception as exc:  # torch, TorchScript and onnxruntime raise their own types
        raise ExportError(
            f"{artifact.path} does not fit this model's inputs ({first_line(exc)}); check it "
            "against the model it was exported from"
        ) from None
    refs = [reference_outputs[i] for i in picked]
    _check_same_outputs(artifact, refs[0], outputs[0])
    cmp = compare_outputs(refs, outputs, tolerance=tolerance, dtype=dtype)
    return Verification(cmp, outputs, picked, len(batches) - len(picked), artifact.runtime)


def _check_same_outputs(artifact: Artifact, reference: Any, output: Any) -> None:
    """Refuse an artifact whose outputs are not the model's (another model's file)."""
    want = {k: tuple(t.shape) for k, t in flatten(reference).items()}
    got = {k: tuple(t.shape) for k, t in flatten(output).items()}
    if want != got:
        raise ExportError(
            f"{artifact.path} returns {_shapes(got)} but the model returns {_shapes(want)}; "
            "check it against the model it was exported from"
        )


def _shapes(named: dict[str, tuple[int, ...]]) -> str:
    text = ", ".join(f"{k or 'output'} {list(v)}" for k, v in list(named.items())[:3])
    return text + (" ..." if len(named) > 3 else "") if text else "no tensors"
