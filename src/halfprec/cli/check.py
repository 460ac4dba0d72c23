"""``halfprec check``: convert, compare against fp32, and time; exit 1 when out of tolerance."""

from __future__ import annotations

from pathlib import Path

import click

from halfprec.check import check
from halfprec.cli.options import (
    device_option,
    dtype_option,
    finish,
    inputs_option,
    islands_options,
    json_option,
    load_for_command,
    model_argument,
    tolerance_override,
    weights_option,
)
from halfprec.cli.progress import progress
from halfprec.report.common import print_check

__all__ = ["command"]


@click.command(help="Compare MODEL in half precision against fp32 (default: builtin:minilm).")
@model_argument
@inputs_option
@weights_option
@dtype_option
@device_option
@json_option
@islands_options
@click.option("--min-cosine", type=float, default=None, help="Override the cosine threshold.")
@click.option("--min-sqnr", type=float, default=None, help="Override the SQNR threshold (dB).")
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
    show_default=True,
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
    dtype: str,
    device: str | None,
    as_json: bool,
    policy: Path | None,
    keep_fp32: tuple[str, ...],
    min_cosine: float | None,
    min_sqnr: float | None,
    artifact: Path | None,
    runs: int,
    generate: int,
) -> None:
    with progress(f"loading {model}", quiet=as_json):
        loaded, batches, _ = load_for_command(model, inputs_path, device, weights)
    if artifact is not None:
        from halfprec.cli.export import check_artifact

        raise SystemExit(
            check_artifact(
                artifact,
                loaded,
                batches,
                min_cosine=min_cosine,
                min_sqnr=min_sqnr,
                as_json=as_json,
            )
        )
    from halfprec.dtypes import resolve_dtype

    half_dtype = resolve_dtype(dtype).dtype if policy is None else None
    tolerance = tolerance_override(half_dtype, min_cosine, min_sqnr)
    with progress(f"checking {loaded.name} against fp32", quiet=as_json):
        result = check(
            loaded.model,
            batches,
            dtype=None if (policy is not None and dtype == "auto") else dtype,
            tolerance=tolerance,
            keep_fp32=keep_fp32,
            policy=str(policy) if policy is not None else None,
            runs=runs,
            name=loaded.name,
            generate=generate,
        )
    finish(result.to_json(), as_json, lambda: print_check(result), result.passed)
