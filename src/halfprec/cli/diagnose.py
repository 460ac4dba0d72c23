"""``halfprec diagnose``: which module breaks in half precision, and why."""

from __future__ import annotations

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
from halfprec.cli.progress import progress
from halfprec.compare import Tolerance
from halfprec.convert.core import convert
from halfprec.diagnose import diagnose
from halfprec.dtypes import resolve_dtype
from halfprec.report.diagnose import plot_diagnosis, print_diagnosis

__all__ = ["command"]


@click.command(help="Find the module where MODEL diverges in half precision, and why.")
@model_argument
@inputs_option
@dtype_option
@device_option
@json_option
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a PNG of error by module in execution order.",
)
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True)
@click.option(
    "--converted",
    is_flag=True,
    help="Diagnose halfprec's convert() output instead of a naive model.to(dtype) copy.",
)
@click.option(
    "--policy",
    type=click.Path(path_type=Path),
    default=None,
    help="Diagnose convert() with this policy (implies --converted).",
)
@click.option("--min-sqnr", type=float, default=None, help="Divergence threshold as SQNR (dB).")
@click.option(
    "--batches",
    "max_batches",
    type=click.IntRange(min=1),
    default=None,
    help="Use only the first N batches.",
)
def command(
    model: str,
    inputs_path: Path | None,
    dtype: str,
    device: str | None,
    as_json: bool,
    plot: Path | None,
    top: int,
    converted: bool,
    policy: Path | None,
    min_sqnr: float | None,
    max_batches: int | None,
) -> None:
    if plot is not None and plot.suffix.lower() != ".png":
        raise click.UsageError(f"--plot {plot} must end in .png")
    with progress(f"loading {model}", quiet=as_json):
        loaded, batches, dev = load_for_command(model, inputs_path, device)
    batches = batches[:max_batches] if max_batches else batches
    use_policy = policy is not None and dtype == "auto"
    dt = None if use_policy else resolve_dtype(dtype, dev).dtype
    half = None
    if converted or policy is not None:
        half = convert(loaded.model, dt, policy=str(policy) if policy is not None else None)
    tolerance = None
    if min_sqnr is not None:
        base = Tolerance.for_dtype(dt)
        tolerance = Tolerance(min_cosine=base.min_cosine, min_sqnr_db=min_sqnr)
    with progress(f"diagnosing {loaded.name}: every module in fp32 and half", quiet=as_json):
        diag = diagnose(loaded.model, batches, dt, half=half, tolerance=tolerance)
    if plot is not None:
        plot_diagnosis(diag, plot, title=f"{loaded.name}: {diag.half_model} half vs fp32")

    def render() -> None:
        print_diagnosis(diag, top)
        if plot is not None:
            click.echo(f"wrote {plot}")

    passed = diag.divergence is None and diag.passed
    finish({"model": loaded.name, **diag.to_json()}, as_json, render, passed)
