"""``convert HF_DIR -o OUTDIR`` as a library call: convert a Hugging Face model directory,
write a directory plain transformers loads, reload it and check it against fp32.

:func:`convert_directory` loads the source directory in fp32 with its example inputs
(:mod:`halfprec.io.hf_inputs`), converts it on ``device``, writes OUTDIR into a temporary
sibling (:func:`~halfprec.io.hf_dir.save_pretrained_dir`), reloads that with plain
``from_pretrained`` on the same device and compares it with the fp32 model there. Only
then is the directory renamed into place: a check that raises (a model that fails on its
inputs, an input that cannot be read) leaves no OUTDIR behind. Nor does a folder whose plain
load cannot run on ``device`` because an op it runs in half has no half kernel there (an
fp32 op island halfprec keeps and config.json cannot express): that is refused.
"""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from halfprec.compare import Comparison, compare
from halfprec.convert.core import ConversionReport, Recipe, conversion_report, convert
from halfprec.dtypes import resolve_device
from halfprec.errors import ModelSpecError
from halfprec.frames import is_library_file
from halfprec.io.hf_dir import (
    HfDirReport,
    InputsInDtype,
    check_new_folder,
    save_pretrained_dir,
    transformers_islands,
)
from halfprec.io.sentence_layout import layout_problem
from halfprec.io.specs import load_model
from halfprec.io.zoo import SentenceEncoder
from halfprec.tree import map_tensors

# torch's messages for an op called with a half dtype it has no kernel for on the device
_NO_KERNEL = re.compile(r"Unsupported dtype (Half|BFloat16)|not implemented for '(Half|BFloat16)'")
# ops without a half kernel on some device, with where the limit is reported upstream
_KNOWN_NO_KERNEL = (("fft", "torch.fft, https://github.com/pytorch/pytorch/issues/117844"),)


@dataclass(frozen=True)
class DirectoryConversion:
    """What :func:`convert_directory` wrote and found.

    ``transformers_keeps_fp32``: per fp32 island, whether plain ``from_pretrained`` keeps
    it in fp32; ``check``: plain ``from_pretrained`` of OUTDIR against the fp32 model on
    ``device`` (None when no example inputs could be built: ``unchecked`` says why).
    """

    written: HfDirReport
    conversion: ConversionReport
    transformers_keeps_fp32: dict[str, bool]
    check: Comparison | None
    device: str
    unchecked: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "output": str(self.written.path),
            "files": list(self.written.files),
            "bytes_written": self.written.bytes_written,
            "transformers_keeps_fp32": self.transformers_keeps_fp32,
            "transformers_check": self.check.to_json() if self.check is not None else None,
            "checked_on": self.device,
            "unchecked": self.unchecked or None,
            **self.conversion.to_json(),
        }


def convert_directory(
    source: str | os.PathLike[str],
    outdir: str | os.PathLike[str],
    recipe: Recipe | None = None,
    *,
    weights: str | os.PathLike[str] | None = None,
    device: str | torch.device | None = None,
    max_shard_size: str | int = "5GB",
) -> DirectoryConversion:
    """Convert the Hugging Face directory ``source`` with ``recipe`` into ``outdir`` (see
    the module docs). ``weights``: fp32 or half weights loaded into the model first (a
    half file is upcast); ``device``: where the conversion and the check run (default:
    cuda if present, else cpu)."""
    problem = layout_problem(Path(source))  # before any work
    if problem is not None:
        raise ModelSpecError(problem)
    check_new_folder(outdir)
    recipe = Recipe.of(recipe)
    dev = resolve_device(device)
    loaded = load_model(str(source))
    if weights is not None:
        from halfprec.io.checkpoint import load

        load(Path(weights), into=loaded.model, upcast=True)
    reference = loaded.model.to(dev)
    half = convert(reference, recipe)
    report = conversion_report(half)
    assert report is not None  # convert() always attaches its report
    batches = [map_tensors(lambda t: t.to(dev), b) for b in loaded.example_inputs]
    found: dict[str, Any] = {}

    def verify(staged: Path) -> None:  # before the directory is renamed into place
        plain = _plain_load(half, staged).eval().to(dev)
        if batches:
            _runs_plainly(plain, batches[0], str(dev))
        found["islands"] = transformers_islands(half, plain)
        tolerance = recipe.settle(dev).judge(report.dtype)
        found["check"] = (
            compare(reference, InputsInDtype(plain), batches, tolerance=tolerance)
            if batches
            else None
        )

    written = save_pretrained_dir(
        half, outdir, source=source, max_shard_size=max_shard_size, verify=verify
    )
    return DirectoryConversion(
        written=written,
        conversion=report,
        transformers_keeps_fp32=found["islands"],
        check=found["check"],
        device=str(dev),
        unchecked=f"{loaded.no_inputs}; check it with halfprec check {outdir} --inputs FILE"
        if loaded.no_inputs
        else "",
    )


def _plain_load(half: torch.nn.Module, staged: Path) -> torch.nn.Module:
    """The written folder loaded by plain ``from_pretrained`` of ``half``'s own class (a
    sentence-transformers encoder: its transformer's, with the same pooling around it)."""
    from halfprec.convert.swap import base_class

    inner = half.encoder if isinstance(half, SentenceEncoder) else half
    cls: Any = base_class(inner)
    plain: torch.nn.Module = cls.from_pretrained(str(staged))
    if isinstance(half, SentenceEncoder):
        return SentenceEncoder(plain, half.pooling, half.normalize)
    return plain


def _runs_plainly(plain: torch.nn.Module, batch: Any, device: str) -> None:
    """Raise :class:`ModelSpecError` when plain ``from_pretrained`` of the written folder
    stops on ``batch`` at an op with no kernel for its half dtype on ``device``: plain
    transformers could not run the folder, so it is not written."""
    from halfprec.batch import call

    try:
        with torch.no_grad():
            call(InputsInDtype(plain), batch)
    except Exception as exc:  # models raise many types; all but a missing kernel are left
        found = _NO_KERNEL.search(str(exc))
        if found is None:
            return  # any other failure is the check's to report
        frames = [
            f for f in traceback.extract_tb(exc.__traceback__) if not is_library_file(f.filename)
        ]
        where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        code = (frames[-1].line or "") if frames else ""
        known = next((f" ({why})" for op, why in _KNOWN_NO_KERNEL if op in code), "")
        dtype = "bf16" if "BFloat16" in found.group(0) else "fp16"
        raise ModelSpecError(
            f"plain transformers from_pretrained of the {dtype} folder cannot run on {device}: "
            f"{found.group(0)}{where}{known}, and config.json cannot keep that one op fp32 as "
            "halfprec does, so nothing was written: write -o FILE.safetensors and load it "
            "with halfprec.load(FILE, into=model), or convert on a device with the kernel"
        ) from exc
