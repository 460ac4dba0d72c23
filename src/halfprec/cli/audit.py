"""``halfprec audit MODEL [--dtype] [--inputs] [--json]``: runtime dtype-leak audit.

Exit codes: 0 no leaks, 1 leaks found (gates CI), 2 usage error.
"""

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


@click.command()
@model_argument
@convert_options
@inputs_option
@device_option
@json_option
def command(
    model: str,
    recipe: Recipe,
    inputs_path: Path | None,
    device: str | None,
    as_json: bool,
) -> None:
    """Run MODEL in half and report every dtype leak by source line.

    Leaks: fp32 tensors made in forward, silent fp32 upcasts, explicit .float(), and
    constants beyond the dtype's range. Exit 1 when any is found.
    """
    from halfprec.leaks.audit import audit
    from halfprec.report.audit import render_table

    loaded, batches, _ = load_for_command(model, inputs_path, device)
    report = audit(loaded.model, batches, recipe)
    finish(report.to_json(), as_json, lambda: render_table(report), report.clean)
