"""``halfprec tune``: find the fp32 islands that make MODEL meet a tolerance; write a recipe."""

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
    not_an_input,
    tolerance_options,
    with_tolerance_flags,
)

if TYPE_CHECKING:
    from halfprec.convert.recipe import Recipe


@click.command(help="Find fp32 islands so MODEL meets the tolerance in half; write a recipe.")
@model_argument
@inputs_option
@convert_options
@device_option
@json_option
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the recipe JSON here (read by --recipe of convert, check, export, ...).",
)
@tolerance_options
@click.option(
    "--max-evaluations",
    type=click.IntRange(min=1),
    default=40,
    help="Most island sets to try per dtype.",
)
@click.option(
    "--validate",
    "validate_path",
    type=click.Path(path_type=Path),
    default=None,
    show_default="the last calibration batch, held out",
    help="Batches to confirm the recipe on (same formats as --inputs).",
)
def command(
    model: str,
    inputs_path: Path | None,
    recipe: Recipe,
    device: str | None,
    as_json: bool,
    output: Path | None,
    min_cosine: float | None,
    min_sqnr: float | None,
    max_evaluations: int,
    validate_path: Path | None,
) -> None:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from halfprec.io.inputs import load_inputs
    from halfprec.report.tune import print_tune
    from halfprec.tree import map_tensors
    from halfprec.tune import tune

    if output is not None and output.suffix != ".json":
        raise click.UsageError(f"output {output} must end in .json")
    if output is not None:
        not_an_input(output, model, {"--inputs": inputs_path, "--validate": validate_path})
    loaded, batches, dev = load_for_command(model, inputs_path, device)
    validate = None
    if validate_path is not None:
        validate = [map_tensors(lambda t: t.to(dev), b) for b in load_inputs(validate_path)]
    recipe = with_tolerance_flags(recipe, min_cosine, min_sqnr)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(f"tuning {loaded.name}", total=None)
        result = tune(
            loaded.model,
            batches,
            recipe,
            max_evaluations=max_evaluations,
            progress=lambda text: bar.update(task, description=text),
            validate=validate,
        )
    if result.recipe is not None and output is not None:
        result.recipe.save(output)
    data = {"model": loaded.name, **result.report.to_json()}
    data["recipe"] = str(output) if result.recipe is not None and output is not None else None

    def render() -> None:
        print_tune(result.report)
        if result.passed and output is not None:
            click.echo(
                f"wrote {output}; use it with: halfprec convert {model} --recipe {output} "
                "-o OUT.safetensors"
            )

    finish(data, as_json, render, result.passed)
