"""Options and loaders shared by the commands: MODEL, --inputs, --dtype, --device."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import torch

from halfprec.batch import Batch
from halfprec.cli import EXIT_FAILED, EXIT_OK
from halfprec.compare import Tolerance
from halfprec.dtypes import resolve_device
from halfprec.errors import InputsError
from halfprec.io.inputs import load_inputs
from halfprec.io.specs import LoadedModel, load_model
from halfprec.tree import map_tensors

__all__ = [
    "DEFAULT_MODEL",
    "model_argument",
    "dtype_option",
    "device_option",
    "inputs_option",
    "json_option",
    "weights_option",
    "islands_options",
    "load_for_command",
    "tolerance_override",
    "finish",
    "mkdirs_option",
]

DEFAULT_MODEL = "builtin:minilm"
F = TypeVar("F", bound=Callable[..., Any])


def model_argument(f: F) -> F:
    return click.argument("model", required=False, default=DEFAULT_MODEL, metavar="[MODEL]")(f)


def dtype_option(f: F) -> F:
    return click.option(
        "--dtype",
        default="auto",
        show_default=True,
        help="fp16, bf16, or auto (best for this device).",
    )(f)


def device_option(f: F) -> F:
    return click.option(
        "--device", default=None, help="cpu, cuda, cuda:N (default: cuda if present)."
    )(f)


def inputs_option(f: F) -> F:
    return click.option(
        "--inputs",
        "inputs_path",
        type=click.Path(path_type=Path),
        default=None,
        help="Example inputs (.safetensors or .pt); default: the model's own examples.",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(f)


def weights_option(f: F) -> F:
    return click.option(
        "--weights",
        type=click.Path(path_type=Path),
        default=None,
        help="fp32 weights to load first (.safetensors, or .pt/.bin read weights-only).",
    )(f)


def islands_options(f: F) -> F:
    """``--policy FILE`` and repeatable ``--keep-fp32 NAME``: which modules stay fp32."""
    f = click.option(
        "--keep-fp32", multiple=True, help="Module name or glob to keep in fp32 (repeatable)."
    )(f)
    return click.option(
        "--policy",
        type=click.Path(path_type=Path),
        default=None,
        help="Policy JSON written by `halfprec tune`.",
    )(f)


def tolerance_override(
    dtype: torch.dtype | None, min_cosine: float | None, min_sqnr: float | None
) -> Tolerance | None:
    """``--min-cosine``/``--min-sqnr`` on top of the dtype's default tolerance (None: defaults)."""
    if min_cosine is None and min_sqnr is None:
        return None
    base = Tolerance.for_dtype(dtype)
    return dataclasses.replace(
        base,
        min_cosine=min_cosine if min_cosine is not None else base.min_cosine,
        min_sqnr_db=min_sqnr if min_sqnr is not None else base.min_sqnr_db,
    )


def load_for_command(
    spec: str, inputs_path: Path | None, device: str | None, weights: Path | None = None
) -> tuple[LoadedModel, list[Batch], torch.device]:
    """Resolve MODEL (plus --weights) and its batches, on the chosen device."""
    dev = resolve_device(device)
    loaded = load_model(spec)
    if weights is not None:
        from halfprec.io.checkpoint import load

        load(weights, into=loaded.model)
    batches = load_inputs(inputs_path) if inputs_path is not None else loaded.example_inputs
    if not batches:
        raise InputsError(
            f"{spec} has no example inputs; pass --inputs FILE (.safetensors or .pt), or "
            "define example_inputs() next to the factory"
        )
    loaded.model.to(dev)
    moved = [map_tensors(lambda t: t.to(dev), b) for b in batches]
    return loaded, moved, dev


def finish(
    data: dict[str, Any], as_json: bool, render: Callable[[], None], passed: bool
) -> NoReturn:
    """Print ``data`` as JSON or call ``render`` for tables, then exit 0 if passed else 1."""
    if as_json:
        from halfprec.report.common import to_json_text

        click.echo(to_json_text(data))
    else:
        render()
    raise SystemExit(EXIT_OK if passed else EXIT_FAILED)


def mkdirs_option(f: F) -> F:
    """``--mkdirs``: create the output's missing folders (default: a missing folder is an error)."""
    return click.option(
        "--mkdirs", is_flag=True, help="Create the output file's folder if it does not exist."
    )(f)
