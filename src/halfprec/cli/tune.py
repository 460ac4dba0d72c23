"""``halfprec tune``: find the fp32 islands that make MODEL meet a tolerance; write a policy."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from halfprec.cli.options import (
    device_option,
    dtype_option,
    finish,
    inputs_option,
    json_option,
    load_for_command,
    model_argument,
    tolerance_override,
)
from halfprec.compare import Tolerance
from halfprec.dtypes import parse_dtype
from halfprec.report.tune import print_tune
from halfprec.tune import tune

__all__ = ["command"]


def _tolerance(dtype: str, min_cosine: float | None, min_sqnr: float | None) -> Tolerance | None:
    return tolerance_override(None if dtype == "auto" else parse_dtype(dtype), min_cosine, min_sqnr)


@click.command(help="Find fp32 islands so MODEL meets the tolerance in half; write a policy.")
@model_argument
@inputs_option
@dtype_option
@device_option
@json_option
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the policy JSON here (read by `halfprec convert --policy`).",
)
@click.option("--min-cosine", type=float, default=None, help="Tolerance: minimum cosine.")
@click.option("--min-sqnr", type=float, default=None, help="Tolerance: minimum SQNR (dB).")
@click.option(
    "--max-evaluations",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Most island sets to try per dtype.",
)
@click.option(
    "--no-default-islands", is_flag=True, help="Do not keep norm layers in fp32 by default."
)
def command(
    model: str,
    inputs_path: Path | None,
    dtype: str,
    device: str | None,
    as_json: bool,
    output: Path | None,
    min_cosine: float | None,
    min_sqnr: float | None,
    max_evaluations: int,
    no_default_islands: bool,
) -> None:
    if output is not None and output.suffix != ".json":
        raise click.UsageError(f"output {output} must end in .json")
    tolerance = _tolerance(dtype, min_cosine, min_sqnr)
    loaded, batches, _ = load_for_command(model, inputs_path, device)
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
            dtype,
            tolerance,
            default_islands=not no_default_islands,
            max_evaluations=max_evaluations,
            progress=lambda text: bar.update(task, description=text),
        )
    if result.passed and output is not None:
        result.save_policy(str(output))
    data = {"model": loaded.name, **result.report.to_json()}
    data["policy"] = str(output) if result.passed and output is not None else None

    def render() -> None:
        print_tune(result.report)
        if result.passed and output is not None:
            click.echo(f"wrote {output}; use it with: halfprec convert MODEL --policy {output}")

    finish(data, as_json, render, result.passed)
