"""``halfprec convert``: write a half-size safetensors checkpoint of MODEL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import click

from halfprec.atomic import ensure_folder
from halfprec.cli.options import (
    convert_options,
    device_option,
    finish,
    json_option,
    model_argument,
    not_an_input,
    weights_option,
)

if TYPE_CHECKING:
    from halfprec.convert.core import ConversionReport
    from halfprec.convert.recipe import Recipe

_SIZE = re.compile(r"\d+(\.\d*)?\s*[KMGT]B|\d+", re.IGNORECASE)


def _shard_size(ctx: click.Context, param: click.Parameter, value: str) -> str | int:
    """A size save_pretrained takes (``5GB``, ``500MB``, bytes), above zero: checked before
    the conversion, not by save_pretrained after it."""
    text = value.strip()
    if not _SIZE.fullmatch(text) or float(re.sub(r"[^\d.]", "", text)) <= 0:
        raise click.BadParameter(f"{value!r} is not a size; write e.g. 5GB, 500MB or 2000000")
    return int(text) if text.isdigit() else text  # save_pretrained reads a str as "NUMBERunit"


@click.command(
    help="Convert MODEL to half precision and save it as safetensors. With --weights "
    "FILE.safetensors (or a sharded checkpoint directory) the conversion streams: MODEL is "
    "built on the meta device and tensors are converted one at a time. For a Hugging Face "
    "model directory, -o OUTDIR (no .safetensors suffix) writes a directory that "
    "transformers' from_pretrained loads, with halfprec's recipe inside."
)
@model_argument
@convert_options
@weights_option
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="Output .safetensors file, or a folder for a Hugging Face model directory.",
)
@click.option(
    "--max-shard-size",
    default="5GB",
    callback=_shard_size,
    help="Folder output: the largest weights file, as save_pretrained takes it.",
)
@device_option
@json_option
def command(
    model: str,
    recipe: Recipe,
    weights: Path | None,
    output: Path,
    device: str | None,
    as_json: bool,
    max_shard_size: str | int,
) -> None:
    from halfprec.convert.core import conversion_report, convert
    from halfprec.dtypes import resolve_device
    from halfprec.io.checkpoint import save
    from halfprec.io.specs import load_model

    not_an_input(output, model, {"--weights": weights})  # before any work
    if output.suffix != ".safetensors":
        if not Path(model).is_dir():
            raise click.UsageError(
                f"output {output} must end in .safetensors (a folder output is for a Hugging "
                "Face model directory as MODEL)"
            )
        _to_directory(model, recipe, weights, output, device, as_json, max_shard_size)
    ensure_folder(output)  # a path that cannot be written, before the slow part
    dev = resolve_device(device)
    if weights is not None and (weights.suffix == ".safetensors" or weights.is_dir()):
        # fp32 safetensors: stream it; MODEL is built on the meta device for its islands
        from halfprec.io.stream import convert_file

        build = lambda: load_model(model).model  # noqa: E731
        report = convert_file(weights, output, build, recipe, device=dev)
    else:
        loaded = load_model(model)
        if weights is not None:
            from halfprec.io.checkpoint import load

            load(weights, into=loaded.model)
        half = convert(loaded.model.to(dev), recipe)
        save(half.cpu(), output)
        found = conversion_report(half)
        assert found is not None  # convert() always attaches its report
        report = found

    def render() -> None:
        _print_written(output, report)

    finish({"output": str(output), **report.to_json()}, as_json, render)


def _to_directory(
    model: str,
    recipe: Recipe,
    weights: Path | None,
    output: Path,
    device: str | None,
    as_json: bool,
    max_shard_size: str | int,
) -> None:
    """``convert HF_DIR -o OUTDIR``: :func:`~halfprec.io.hf_convert.convert_directory`."""
    from halfprec.io.hf_convert import convert_directory
    from halfprec.io.hf_dir import describe
    from halfprec.report.common import make_console

    done = convert_directory(
        model, output, recipe, weights=weights, device=device, max_shard_size=max_shard_size
    )

    def render() -> None:
        con = make_console()
        islands = done.transformers_keeps_fp32
        for line in describe(done.written, islands, done.conversion.dtype):
            con.print(line)
        if done.check is not None:
            verdict = "PASS" if done.check.passed else "FAIL"
            con.print(
                f"  plain transformers from_pretrained against fp32 on {done.device}: "
                f"{verdict} ({done.check.reason})"
            )
            if not done.check.passed:
                con.print(
                    f"  halfprec.load({str(output)!r}, into=build) gives back the model halfprec "
                    "converted (its islands and guards), which plain from_pretrained does not"
                )
        else:
            con.print(f"  not checked against fp32: {done.unchecked}")

    # a folder plain transformers runs out of tolerance is a finding, as in check: exit 1
    finish(done.to_json(), as_json, render, passed=done.check is None or done.check.passed)


def _print_written(output: Path, report: ConversionReport) -> None:
    from halfprec.dtypes import dtype_name
    from halfprec.report.common import fp32_text, human_bytes, make_console

    con = make_console()
    con.print(f"wrote {output}: {dtype_name(report.dtype)} ({report.reason})")
    on_disk = output.stat().st_size
    ratio = on_disk / max(report.bytes_before, 1)
    before = human_bytes(report.bytes_before)
    con.print(f"  {before} fp32 -> {human_bytes(on_disk)} on disk ({ratio:.2f}x)")
    con.print(f"  {fp32_text(report)}")
