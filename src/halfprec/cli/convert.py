"""``halfprec convert``: write a half-size safetensors checkpoint of MODEL."""

from __future__ import annotations

from pathlib import Path

import click

from halfprec.atomic import ensure_folder
from halfprec.cli.options import (
    convert_options,
    device_option,
    finish,
    json_option,
    mkdirs_option,
    weights_option,
)
from halfprec.convert.core import ConversionReport, Recipe, conversion_report, convert
from halfprec.dtypes import dtype_name, resolve_device
from halfprec.io.checkpoint import save
from halfprec.io.specs import load_model
from halfprec.report.common import human_bytes, make_console

__all__ = ["command"]


@click.command(
    help="Convert MODEL to half precision and save it as safetensors. With --weights "
    "FILE.safetensors (or a sharded checkpoint directory) the conversion streams: MODEL is "
    "built on the meta device and tensors are converted one at a time."
)
@click.argument("model")
@convert_options
@weights_option
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="Output .safetensors file.",
)
@mkdirs_option
@device_option
@json_option
def command(
    model: str,
    convert_config: Recipe,
    weights: Path | None,
    output: Path,
    mkdirs: bool,
    device: str | None,
    as_json: bool,
) -> None:
    if output.suffix != ".safetensors":
        raise click.UsageError(f"output {output} must end in .safetensors")
    ensure_folder(output, mkdirs=mkdirs)  # before the slow part
    dev = resolve_device(device)
    if weights is not None and (weights.suffix == ".safetensors" or weights.is_dir()):
        # fp32 safetensors: stream it; MODEL is built on the meta device for its islands
        from halfprec.io.stream import convert_file

        build = lambda: load_model(model).model  # noqa: E731
        report = convert_file(weights, output, build, convert_config, device=dev)
    else:
        loaded = load_model(model)
        if weights is not None:
            from halfprec.io.checkpoint import load

            load(weights, into=loaded.model)
        half = convert(loaded.model.to(dev), convert_config)
        save(half.cpu(), output)
        found = conversion_report(half)
        assert found is not None  # convert() always attaches its report
        report = found

    def render() -> None:
        _print_written(output, report)

    finish({"output": str(output), **report.to_json()}, as_json, render)


def _print_written(output: Path, report: ConversionReport) -> None:
    con = make_console()
    con.print(f"wrote {output}: {dtype_name(report.dtype)} ({report.reason})")
    on_disk = output.stat().st_size
    ratio = on_disk / max(report.bytes_before, 1)
    before = human_bytes(report.bytes_before)
    con.print(f"  {before} fp32 -> {human_bytes(on_disk)} on disk ({ratio:.2f}x)")
    share = 100 * report.fp32_share
    con.print(f"  fp32 islands: {len(report.islands)} modules, {share:.2f}% of parameters")
