"""``halfprec check``: convert, compare against fp32, and time; exit 1 when out of tolerance."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from halfprec.cli.options import (
    convert_options,
    device_option,
    finish,
    inputs_option,
    json_option,
    load_for_command,
    model_argument,
    tolerance_options,
    weights_option,
    with_tolerance_flags,
)
from halfprec.cli.progress import progress

if TYPE_CHECKING:
    from halfprec.convert.recipe import Recipe


@click.command(help="Compare MODEL in half precision against fp32; exit 1 when out of tolerance.")
@model_argument
@inputs_option
@weights_option
@convert_options
@device_option
@json_option
@tolerance_options
@click.option(
    "--artifact",
    type=click.Path(path_type=Path),
    default=None,
    help="Check a file from `halfprec export` (.pt2, .ts/.pt, .onnx) against fp32 MODEL.",
)
@click.option(
    "--runs",
    type=click.IntRange(min=0),
    default=10,
    help="Timed runs (0: no timing).",
)
@click.option(
    "--generate",
    type=click.IntRange(min=0),
    default=0,
    help="Causal LMs: greedy-decode N new tokens in fp32 and half from the example "
    "prompts, and report token agreement and the first divergence.",
)
def command(
    model: str,
    inputs_path: Path | None,
    weights: Path | None,
    recipe: Recipe,
    device: str | None,
    as_json: bool,
    min_cosine: float | None,
    min_sqnr: float | None,
    artifact: Path | None,
    runs: int,
    generate: int,
) -> None:
    from halfprec.check import check
    from halfprec.report.common import print_check

    if artifact is not None:  # its suffix names its format: refused before the model loads
        from halfprec.export.config import format_for_path

        format_for_path(artifact)
    with progress(f"loading {model}", quiet=as_json):
        loaded, batches, _ = load_for_command(model, inputs_path, device, weights)
    recipe = with_tolerance_flags(recipe, min_cosine, min_sqnr)
    if artifact is not None:
        from halfprec.export.checking import check_artifact
        from halfprec.report.export import print_artifact_check

        done = check_artifact(artifact, loaded.model, batches, recipe, name=loaded.name)
        render = lambda: print_artifact_check(  # noqa: E731
            done.artifact, done.comparison, done.skipped_batches
        )
        finish(done.to_json(), as_json, render, done.passed)
    with progress(f"checking {loaded.name} against fp32", quiet=as_json):
        result = check(
            loaded.model, batches, recipe, runs=runs, name=loaded.name, generate=generate
        )
    data = {**result.to_json(), "stored_dtype": loaded.stored_dtype or None, "notes": loaded.notes}
    finish(data, as_json, lambda: print_check(result), result.passed)
