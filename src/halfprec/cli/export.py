"""``halfprec export``: write MODEL in half precision as .pt2, TorchScript or ONNX, checked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from halfprec.atomic import ensure_folder
from halfprec.cli.options import (
    convert_options,
    device_option,
    finish,
    from_flags,
    inputs_option,
    json_option,
    load_for_command,
    model_argument,
    not_an_input,
)
from halfprec.cli.progress import progress

if TYPE_CHECKING:
    from halfprec.convert.recipe import Recipe

FORMATS = ("exported-program", "torchscript", "onnx")
"""halfprec.export.FORMATS, spelled here so that parsing the flags needs no torch."""

__all__ = ["command"]


@click.command(
    help="Export MODEL in half precision (.pt2, TorchScript or ONNX) and check the file "
    "against fp32."
)
@model_argument
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="Output file: *.pt2, *.ts / *.pt, or *.onnx.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    show_default="the one the output's suffix names",
    help="Artifact format; it must fit the output's suffix.",
)
@convert_options
@click.option(
    "--static",
    is_flag=True,
    help="Fix the input shapes to the first example batch; without it the batch and "
    "whichever dims vary between example batches stay dynamic.",
)
@click.option("--half-io", is_flag=True, help="Take and return half tensors instead of fp32 ones.")
@click.option(
    "--kv-cache",
    is_flag=True,
    help="Hugging Face LMs: the KV cache as tensors (past_key_values in, "
    "present_key_values out), checked on a split prompt, a one-token step and an empty past. "
    "Encoder-decoders: two files, OUTPUT (decoder step) and its .encoder twin.",
)
@click.option(
    "--opset",
    type=click.IntRange(min=17),
    default=18,  # halfprec.export.config.DEFAULT_OPSET, not imported here: it needs torch
    help="ONNX opset (>= 17).",
)
@click.option(
    "--runs",
    type=click.IntRange(min=0),
    default=10,
    help="ONNX: timed onnxruntime runs of the fp32 and half files (0: no timing).",
)
@inputs_option
@device_option
@json_option
def command(
    model: str,
    output: Path,
    fmt: str | None,
    recipe: Recipe,
    static: bool,
    half_io: bool,
    kv_cache: bool,
    opset: int,
    runs: int,
    inputs_path: Path | None,
    device: str | None,
    as_json: bool,
) -> None:
    from halfprec.export import export
    from halfprec.export.config import ExportConfig
    from halfprec.report.export import print_export

    # fail on the file name, format, dtype and folder before loading the model
    with from_flags():
        ExportConfig.for_path(
            output,
            fmt,  # type: ignore[arg-type]
            dtype=recipe.requested,
            dynamic=not static,
            opset=opset,
            kv_cache=kv_cache,
        )
    not_an_input(output, model, {"--inputs": inputs_path})
    ensure_folder(output)  # a path that cannot be written, before the slow part
    with progress(f"loading {model}", quiet=as_json):
        loaded, batches, _ = load_for_command(model, inputs_path, device)
    with progress(f"exporting {loaded.name} to {output} and checking it", quiet=as_json):
        result = export(
            loaded.model,
            batches,
            output,
            recipe,
            format=fmt,  # type: ignore[arg-type]
            dynamic=not static,
            half_io=half_io,
            opset=opset,
            runs=runs,
            name=loaded.name,
            kv_cache=kv_cache,
        )
    finish(result.to_json(), as_json, lambda: print_export(result), result.passed)
