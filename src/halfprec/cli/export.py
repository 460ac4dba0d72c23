"""``halfprec export``: write MODEL in half precision as .pt2, TorchScript or ONNX, checked."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from halfprec.batch import Batch
from halfprec.cli import EXIT_FAILED, EXIT_OK
from halfprec.cli.options import (
    finish,
    inputs_option,
    islands_options,
    json_option,
    load_for_command,
)
from halfprec.cli.progress import progress
from halfprec.compare import Tolerance, run_reference
from halfprec.export import FORMATS, ExportConfig, export, load_artifact, verify_artifact
from halfprec.io.specs import LoadedModel
from halfprec.report.common import to_json_text
from halfprec.report.export import print_artifact_check, print_export

__all__ = ["command", "check_artifact"]


@click.command(
    help="Export MODEL in half precision (.pt2, TorchScript or ONNX) and check the file "
    "against fp32."
)
@click.argument("model")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="Output file: *.pt2, *.ts / *.pt, or *.onnx.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Artifact format (default: from the output suffix).",
)
@click.option(
    "--dtype",
    default="auto",
    show_default=True,
    help="fp16, bf16 or auto (best for this device; fp16 for ONNX).",
)
@islands_options
@click.option(
    "--no-norm-islands",
    is_flag=True,
    help="Convert norm layers too (BatchNorm then folds into Conv in ONNX runtimes); "
    "modules whose weights overflow the dtype still stay fp32.",
)
@click.option(
    "--static",
    is_flag=True,
    help="Fix the input shapes to the first example batch (default: dynamic batch and "
    "whichever dims vary between example batches).",
)
@click.option("--half-io", is_flag=True, help="Take and return half tensors instead of fp32 ones.")
@click.option("--opset", type=click.IntRange(min=17), default=None, help="ONNX opset (>= 17).")
@click.option(
    "--runs",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="ONNX: timed onnxruntime runs of the fp32 and half files (0: no timing).",
)
@inputs_option
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="Device to convert and trace on (cpu, cuda, cuda:N); ONNX checks run on CPU.",
)
@json_option
def command(
    model: str,
    output: Path,
    fmt: str | None,
    dtype: str,
    policy: Path | None,
    keep_fp32: tuple[str, ...],
    no_norm_islands: bool,
    static: bool,
    half_io: bool,
    opset: int | None,
    runs: int,
    inputs_path: Path | None,
    device: str,
    as_json: bool,
) -> None:
    # fail on the file name, format and dtype before loading the model
    ExportConfig.for_path(output, fmt, dtype=dtype, opset=opset)  # type: ignore[arg-type]
    with progress(f"loading {model}", quiet=as_json):
        loaded, batches, _ = load_for_command(model, inputs_path, device)
    with progress(f"exporting {loaded.name} to {output} and checking it", quiet=as_json):
        result = export(
            loaded.model,
            batches,
            output,
            format=fmt,  # type: ignore[arg-type]
            dtype=dtype,
            dynamic=not static,
            half_io=half_io,
            opset=opset,
            keep_fp32=keep_fp32,
            default_islands=not no_norm_islands,
            policy=str(policy) if policy is not None else None,
            runs=runs,
            name=loaded.name,
        )
    finish(result.to_json(), as_json, lambda: print_export(result), result.passed)


def check_artifact(
    path: Path,
    loaded: LoadedModel,
    batches: list[Batch],
    *,
    min_cosine: float | None,
    min_sqnr: float | None,
    as_json: bool,
) -> int:
    """``halfprec check --artifact``: the exported file against the fp32 MODEL; exit code."""
    artifact = load_artifact(path)
    overrides: dict[str, Any] = {"min_cosine": min_cosine, "min_sqnr_db": min_sqnr}
    tolerance = dataclasses.replace(
        Tolerance.for_dtype(artifact.dtype),
        **{k: v for k, v in overrides.items() if v is not None},
    )
    reference = run_reference(loaded.model.eval(), batches)
    check = verify_artifact(artifact, batches, reference, tolerance=tolerance)
    if as_json:
        click.echo(
            to_json_text(
                {
                    "artifact": str(path),
                    "info": artifact.info.__dict__,
                    "model": loaded.name,
                    "skipped_batches": check.skipped_batches,
                    **check.comparison.to_json(),
                }
            )
        )
    else:
        print_artifact_check(artifact, check.comparison, check.skipped_batches)
    return EXIT_OK if check.comparison.passed else EXIT_FAILED
