"""``halfprec preflight``: values the half dtype cannot hold, found before converting."""

from __future__ import annotations

from pathlib import Path

import click

from halfprec.cli import EXIT_FAILED, EXIT_OK
from halfprec.cli.options import (
    device_option,
    dtype_option,
    inputs_option,
    json_option,
    load_for_command,
    model_argument,
)
from halfprec.preflight import preflight
from halfprec.report.common import to_json_text
from halfprec.report.diagnose import print_preflight

__all__ = ["command"]


@click.command(help="Check MODEL's weights, eps and fill constants against a half dtype.")
@model_argument
@inputs_option
@dtype_option
@device_option
@json_option
@click.option("--no-forward", is_flag=True, help="Static checks only (no fill constants).")
def command(
    model: str,
    inputs_path: Path | None,
    dtype: str,
    device: str | None,
    as_json: bool,
    no_forward: bool,
) -> None:
    loaded, batches, _ = load_for_command(model, inputs_path, device)
    result = preflight(loaded.model, dtype, None if no_forward else batches)
    if as_json:
        click.echo(to_json_text({"model": loaded.name, **result.to_json()}))
    else:
        print_preflight(result)
    raise SystemExit(EXIT_FAILED if result.problems else EXIT_OK)
