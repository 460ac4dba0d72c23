"""The forms deploy writes its choice in, known from the output path alone.

This module imports neither torch nor the model code, so ``halfprec deploy -o NAME.txt``
is refused in well under a second: the suffix of ``-o`` names the form (a checkpoint, a
folder, an OpenVINO IR, an ONNX file), and :func:`output_problem` says, before anything
loads, why a path can hold no choice deploy may make.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

FORMS: dict[str, str] = {
    ".safetensors": "a half checkpoint (a choice run by torch)",
    "": "a folder plain from_pretrained loads (a choice run by torch, from a Hugging Face "
    "directory)",
    ".xml": "an OpenVINO IR (an OpenVINO choice)",
    ".onnx": "an ONNX file (an onnxruntime choice)",
}
RUNTIME_SUFFIX: dict[str, str] = {"openvino": ".xml", "onnxruntime": ".onnx"}

# the forms that hold a choice run by torch (a checkpoint, a folder)
TORCH_FORMS = (".safetensors", "")


def _forms_text() -> str:
    return "; ".join(f"{s or 'no suffix'}: {what}" for s, what in FORMS.items())


def runtimes_for(
    path: str | os.PathLike[str], runtimes: Sequence[str] | None
) -> Sequence[str] | None:
    """The runtimes deploy tries for an output at ``path``: with the default (None: those
    installed that compute a half dtype here) and a form that holds only a choice run by
    torch (a checkpoint, a folder), none, so that deploy never picks a choice the path
    cannot hold; ``runtimes`` as given otherwise (:func:`output_problem` refuses a torch
    form with runtimes named)."""
    return () if runtimes is None and Path(path).suffix in TORCH_FORMS else runtimes


def output_problem(path: str | os.PathLike[str], runtimes: Sequence[str] | None) -> str | None:
    """Why ``path`` cannot hold any choice deploy may make with ``runtimes`` (deploy's
    argument: None, the installed ones; ``()``, none), in one line; None when it can."""
    suffix = Path(path).suffix
    if suffix not in FORMS:
        return f"-o {path}: deploy writes {_forms_text()}; give one of those"
    runtime = next((r for r, s in RUNTIME_SUFFIX.items() if s == suffix), None)
    allowed = runtimes is None or "all" in runtimes or runtime in runtimes
    if runtime is not None and not allowed:
        return (
            f"-o {path} holds {FORMS[suffix]}, but deploy may choose no {runtime} variant "
            f"with these runtimes ({', '.join(runtimes or ()) or 'none'}); add --runtimes "
            f"{runtime}, or give a .safetensors path"
        )
    if runtime is None and suffix in FORMS and runtimes and list(runtimes) != ["none"]:
        return (
            f"-o {path} holds {FORMS[suffix]}, and --runtimes {','.join(runtimes)} may choose "
            "a runtime's, which it cannot hold; give -o NAME.xml (openvino) or NAME.onnx "
            "(onnxruntime), or leave --runtimes out"
        )
    return None
