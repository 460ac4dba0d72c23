"""``halfprec preflight``: values the half dtype cannot hold, found before converting."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from halfprec.cli.options import (
    device_option,
    dtype_option,
    finish,
    inputs_option,
    json_option,
    load_for_command,
    model_argument,
)
from halfprec.preflight import preflight
from halfprec.report.diagnose import print_preflight

__all__ = ["command"]


@click.command(help="Check MODEL's weights, eps and fill constants against a half dtype.")
@model_argument
@inputs_option
@functools.partial(dtype_option, default="auto")  # preflight takes no --recipe
@device_option
@json_option
@click.option("--no-forward", is_flag=True, help="Static checks only (no fill constants).")
def command(
    model: str,
    inputs_path: Path | None,
    dtype: str | None,
    device: str | None,
    as_json: bool,
    no_forward: bool,
) -> None:
    loaded, batches, _ = load_for_command(model, inputs_path, device)
    result = preflight(loaded.model, None if no_forward else batches, dtype)
    data = {"model": loaded.name, **result.to_json()}
    finish(data, as_json, lambda: print_preflight(result), not result.problems)
