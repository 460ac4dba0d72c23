"""``halfprec preflight``: values the half dtype cannot hold, found before converting."""

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
)

if TYPE_CHECKING:
    from halfprec.convert.recipe import Recipe


@click.command(
    help="Check MODEL's weights, eps and fill constants against a half dtype; each finding "
    "says whether convert, with the same recipe, handles it, and by which recipe field."
)
@model_argument
@inputs_option
@convert_options
@device_option
@json_option
@click.option("--no-forward", is_flag=True, help="Static checks only (no fill constants).")
def command(
    model: str,
    inputs_path: Path | None,
    recipe: Recipe,
    device: str | None,
    as_json: bool,
    no_forward: bool,
) -> None:
    from halfprec.preflight import preflight
    from halfprec.report.diagnose import print_preflight

    loaded, batches, _ = load_for_command(model, inputs_path, device)
    result = preflight(loaded.model, None if no_forward else batches, recipe)
    data = {"model": loaded.name, **result.to_json()}
    finish(data, as_json, lambda: print_preflight(result), not result.problems)
