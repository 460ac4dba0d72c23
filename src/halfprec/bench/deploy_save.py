"""Write deploy's choice to a path, in the form that choice is saved in.

The form follows the path: a ``.safetensors`` file or a folder (a Hugging Face directory
that plain ``from_pretrained`` loads) for a choice run by torch, an ``.xml`` OpenVINO IR
for an OpenVINO choice, an ``.onnx`` file for an onnxruntime one. Each is written by that
way's own save (:attr:`~halfprec.bench.ways.base.Way.saving`): :func:`halfprec.save`,
:func:`~halfprec.io.hf_dir.save_pretrained_dir` or the runtime's
:meth:`~halfprec.runtimes.RuntimeModule.save`. A compiled torch choice is saved as the
module it compiled (its weights and recipe): torch.compile's graph is not a file, so it is
compiled again after loading. :func:`~halfprec.bench.deploy_forms.output_problem`
(torch-free) refuses a path of no known form before deploy runs; :func:`save_deployed`
refuses a form that cannot hold the choice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.bench.deploy import Deployed, deploy
from halfprec.bench.deploy_forms import FORMS, RUNTIME_SUFFIX, output_problem, runtimes_for
from halfprec.bench.ways.base import TORCH
from halfprec.convert.recipe import Recipe
from halfprec.dtypes import DeviceSupport, device_support, dtype_name
from halfprec.errors import HalfprecError
from halfprec.modules import model_device
from halfprec.tolerance import Tolerance


def save_deployed(
    done: Deployed, path: str | os.PathLike[str], *, source: str | os.PathLike[str] | None = None
) -> Path:
    """Write ``done``'s chosen module to ``path`` (see the module docs) and return it.
    ``source``: the Hugging Face directory the model came from (its tokenizer and other
    files go into a folder output). A path whose form cannot hold the choice is a
    :class:`~halfprec.errors.HalfprecError` naming the form that can; nothing is written."""
    dest = Path(path)
    runtime = done.runtime
    if runtime != TORCH:
        want = RUNTIME_SUFFIX.get(runtime)
        if want is None or dest.suffix != want:
            raise HalfprecError(
                f"deploy chose {done.variant}, run by {runtime}, which is saved as its own "
                f"file ({want or 'none known'}); give -o NAME{want or ''}"
            )
        saved: Path = done.model.save(dest)  # type: ignore[operator]
        return saved
    module = _uncompiled(done.model)
    if dest.suffix == ".safetensors":
        from halfprec.io.checkpoint import save

        return save(module, dest)
    if dest.suffix == "" and done.variant == "fp32":
        raise HalfprecError(
            f"deploy chose fp32 (no half variant was faster here within tolerance), and a "
            f"folder holds a half model; give -o NAME.safetensors, or serve the fp32 model "
            f"you have ({done.summary})"
        )
    if dest.suffix == "":
        from halfprec.io.hf_dir import save_pretrained_dir

        return save_pretrained_dir(module, dest, source=source).path
    raise HalfprecError(
        f"deploy chose {done.variant}, run by torch, which is saved as {FORMS['.safetensors']} "
        f"or {FORMS['']}; give -o NAME.safetensors (or a folder), not {dest.suffix}"
    )


def _uncompiled(module: nn.Module) -> nn.Module:
    """The module a compiled choice compiled (same parameters), else ``module`` itself."""
    inner = getattr(module, "compiled", None)  # bench's compiled wrapper
    inner = getattr(inner, "_orig_mod", inner)  # torch.compile's OptimizedModule
    return inner if isinstance(inner, nn.Module) else module


def folder_problem(
    path: str | os.PathLike[str], support: DeviceSupport, dtypes: Sequence[torch.dtype]
) -> str | None:
    """Why a folder ``path`` (a half model's form) cannot hold what deploy will choose, in
    one line, known before anything is timed: the device's row of the device table
    (``support``) has no fast kernels for any half dtype deploy would try (``dtypes``), so
    every half variant is probed slow and fp32 is kept (a Zen 3 without AVX512-BF16 or
    AMX). None where a half variant may win."""
    if Path(path).suffix != "" or any(support.fast(dt) for dt in dtypes):
        return None
    names = " or ".join(dtype_name(dt) for dt in dtypes) or "half"
    return (
        f"-o {path}: a folder holds a half model, and {support.name} has no fast {names} "
        "kernels, so deploy would keep fp32 here; give -o NAME.safetensors, which holds "
        "any choice"
    )


def folder_problem_on(
    path: str | os.PathLike[str],
    device: str | torch.device,
    recipe: Recipe | str | torch.dtype = "auto",
    tolerance: Tolerance | None = None,
    support: DeviceSupport | None = None,
) -> str | None:
    """:func:`folder_problem` for deploy's own arguments: the half dtypes ``recipe`` settles
    to on ``device`` (``support``: that device's row of the device table, default its own).
    Known from the device alone, so the command line asks it before the model loads."""
    if Path(path).suffix != "":
        return None
    dtypes = Recipe.of(recipe).settle(device, tolerance).dtypes
    return folder_problem(path, support or device_support(device), dtypes)


def deploy_to(
    path: str | os.PathLike[str],
    model: nn.Module,
    inputs: Any,
    *,
    source: str | os.PathLike[str] | None = None,
    runtimes: Sequence[str] | None = None,
    support: DeviceSupport | None = None,
    notice: Callable[[str], object] | None = None,
    **options: Any,
) -> Deployed:
    """:func:`~halfprec.deploy` ``model`` on ``inputs`` (``runtimes`` and ``options`` as
    deploy takes them) and write its choice to ``path`` (:func:`save_deployed`). A path that
    holds only a choice run by torch (a checkpoint, a folder) tries no runtime by default
    (:func:`~halfprec.bench.deploy_forms.runtimes_for`), and refuses runtimes named. A path of
    no form the choice could take is refused before deploy runs, a folder too where the
    device (``support``: its row of the device table, default the model's device's) has no
    fast kernels for the half dtypes tried (:func:`folder_problem`). ``notice(line)``: told,
    before deploy runs, what a folder will hold (the command line prints it)."""
    problem = output_problem(path, runtimes) or folder_problem_on(
        path, model_device(model), options.get("recipe", "auto"), options.get("tolerance"), support
    )
    if problem is None and source is not None and Path(path).suffix == "":
        from halfprec.io.sentence_layout import layout_problem

        problem = layout_problem(Path(source))  # a folder that cannot be written faithfully
    if problem is not None:
        raise HalfprecError(problem)
    if notice is not None and Path(path).suffix == "":
        notice(
            f"{path} will hold the choice if it is a half variant; where fp32 is kept nothing "
            "is written (exit 2), as a folder holds a half model: -o NAME.safetensors holds "
            "any choice"
        )
    done = deploy(model, inputs, runtimes=runtimes_for(path, runtimes), **options)
    save_deployed(done, path, source=source)
    return done
