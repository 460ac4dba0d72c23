"""``halfprec convert``: write a half-size safetensors checkpoint of MODEL."""

from __future__ import annotations

from pathlib import Path

import click

from halfprec.atomic import ensure_folder
from halfprec.cli.options import (
    dtype_option,
    islands_options,
    json_option,
    mkdirs_option,
    weights_option,
)
from halfprec.convert.core import conversion_report, convert
from halfprec.dtypes import dtype_name, resolve_device
from halfprec.io.checkpoint import save
from halfprec.io.specs import load_model
from halfprec.report.common import human_bytes, make_console, to_json_text

__all__ = ["command"]


@click.command(help="Convert MODEL to half precision and save it as safetensors.")
@click.argument("model")
@dtype_option
@weights_option
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="Output .safetensors file.",
)
@islands_options
@mkdirs_option
@click.option(
    "--device", default="cpu", show_default=True, help="Device whose kernels `auto` targets."
)
@json_option
def command(
    model: str,
    dtype: str,
    weights: Path | None,
    output: Path,
    policy: Path | None,
    keep_fp32: tuple[str, ...],
    mkdirs: bool,
    device: str,
    as_json: bool,
) -> None:
    if output.suffix != ".safetensors":
        raise click.UsageError(f"output {output} must end in .safetensors")
    ensure_folder(output, mkdirs=mkdirs)  # before the slow part
    dev = resolve_device(device)
    loaded = load_model(model)
    if weights is not None:
        from halfprec.io.checkpoint import load

        load(weights, into=loaded.model)
    half = convert(
        loaded.model.to(dev),
        None if (policy is not None and dtype == "auto") else dtype,
        keep_fp32=keep_fp32,
        policy=str(policy) if policy is not None else None,
    )
    save(half.cpu(), output)
    report = conversion_report(half)
    assert report is not None  # convert() always attaches its report
    if as_json:
        click.echo(to_json_text({"output": str(output), **report.to_json()}))
        return
    con = make_console()
    con.print(f"wrote {output}: {dtype_name(report.dtype)} ({report.reason})")
    on_disk = output.stat().st_size
    ratio = on_disk / max(report.bytes_before, 1)
    before = human_bytes(report.bytes_before)
    con.print(f"  {before} fp32 -> {human_bytes(on_disk)} on disk ({ratio:.2f}x)")
    share = 100 * report.fp32_share
    con.print(f"  fp32 islands: {len(report.islands)} modules, {share:.2f}% of parameters")
