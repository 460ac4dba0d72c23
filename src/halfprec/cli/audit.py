"""``halfprec audit MODEL [--dtype] [--inputs] [--json]``: runtime dtype-leak audit.

Exit codes: 0 no leaks, 1 leaks found (gates CI), 2 usage error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from halfprec.cli import EXIT_FAILED, EXIT_OK
from halfprec.dtypes import parse_dtype
from halfprec.errors import InputsError
from halfprec.leaks.audit import audit
from halfprec.report.audit import render_json, render_table


def _load(spec: str, inputs: Path | None) -> tuple[Any, Any]:
    from halfprec.io.inputs import load_inputs
    from halfprec.io.specs import load_model

    loaded = load_model(spec)
    batches = load_inputs(inputs) if inputs is not None else loaded.example_inputs
    if not batches:
        raise InputsError(f"{spec} has no example inputs; pass --inputs FILE")
    return loaded.model, batches


@click.command()
@click.argument("model")
@click.option("--dtype", default="fp16", show_default=True, help="fp16, bf16 or auto.")
@click.option(
    "--inputs",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Example inputs (default: the model's own examples).",
)
@click.option("--keep-fp32", multiple=True, help="Module names (globs) kept in fp32.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(
    model: str, dtype: str, inputs: Path | None, keep_fp32: tuple[str, ...], as_json: bool
) -> None:
    """Run MODEL in half and report every dtype leak by source line.

    Leaks: fp32 tensors made in forward, silent fp32 upcasts, explicit .float(), and
    constants beyond the dtype's range. Exit 1 when any is found.
    """
    if dtype.strip().lower() != "auto":
        parse_dtype(dtype)
    net, batches = _load(model, inputs)
    report = audit(net, batches, dtype, keep_fp32=keep_fp32)
    if as_json:
        click.echo(render_json(report))
    else:
        render_table(report)
    click.get_current_context().exit(EXIT_OK if report.clean else EXIT_FAILED)
