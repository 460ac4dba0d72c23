"""``halfprec diagnose``: which module breaks in half precision, and why."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from halfprec.atomic import ensure_folder
from halfprec.cli.options import (
    convert_options,
    device_option,
    finish,
    inputs_option,
    json_option,
    load_for_command,
    model_argument,
    not_an_input,
    tolerance_options,
    with_tolerance_flags,
)
from halfprec.cli.progress import progress

if TYPE_CHECKING:
    from halfprec.convert.recipe import Recipe


@click.command(help="Find the module where MODEL diverges in half precision, and why.")
@model_argument
@inputs_option
@convert_options
@device_option
@json_option
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a PNG of error by module in execution order.",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=15,
    help="Modules to list, largest error first.",
)
@click.option(
    "--converted",
    is_flag=True,
    help="Diagnose halfprec's convert() output instead of a naive model.to(dtype) copy "
    "(implied where --recipe, --keep-fp32, --no-norm-islands or --no-op-policy ask for more "
    "than a dtype).",
)
@tolerance_options
@click.option(
    "--batches",
    "max_batches",
    type=click.IntRange(min=1),
    default=None,
    show_default="every batch",
    help="Use only the first N batches.",
)
def command(
    model: str,
    inputs_path: Path | None,
    recipe: Recipe,
    device: str | None,
    as_json: bool,
    plot: Path | None,
    top: int,
    converted: bool,
    min_cosine: float | None,
    min_sqnr: float | None,
    max_batches: int | None,
) -> None:
    from halfprec.convert.core import convert
    from halfprec.diagnose import diagnose
    from halfprec.report.diagnose import plot_diagnosis, print_diagnosis

    if plot is not None and plot.suffix.lower() != ".png":
        raise click.UsageError(f"--plot {plot} must end in .png")
    if plot is not None:
        ensure_folder(plot)  # a path that cannot be written, before the long run
        not_an_input(plot, model, {"--inputs": inputs_path}, flag="--plot")
    with progress(f"loading {model}", quiet=as_json):
        loaded, batches, _ = load_for_command(model, inputs_path, device)
    batches = batches[:max_batches] if max_batches else batches
    recipe = with_tolerance_flags(recipe, min_cosine, min_sqnr)
    half = convert(loaded.model, recipe) if converted else None  # else diagnose's choice
    with progress(f"diagnosing {loaded.name}: every module in fp32 and half", quiet=as_json):
        diag = diagnose(loaded.model, batches, recipe, half=half)
    if plot is not None:
        plot_diagnosis(diag, plot, title=f"{loaded.name}: {diag.half_model} half vs fp32")

    def render() -> None:
        print_diagnosis(diag, top)
        if plot is not None:
            click.echo(f"wrote {plot}")

    passed = diag.divergence is None and diag.passed
    finish({"model": loaded.name, **diag.to_json()}, as_json, render, passed)
