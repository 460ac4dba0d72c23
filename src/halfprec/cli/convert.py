"""``halfprec convert``: write a half-size safetensors checkpoint of MODEL."""

from __future__ import annotations

from pathlib import Path

import click
import torch

from halfprec.cli.options import dtype_option, islands_options, json_option, weights_option
from halfprec.convert.core import ConversionReport, conversion_report, convert
from halfprec.convert.policy import Policy
from halfprec.dtypes import dtype_name, resolve_device, resolve_dtype
from halfprec.io.checkpoint import save
from halfprec.io.specs import load_model
from halfprec.report.common import human_bytes, make_console, to_json_text

__all__ = ["command"]


def _stream(
    model: str,
    weights: Path,
    output: Path,
    requested: str | None,
    keep_fp32: tuple[str, ...],
    policy: Path | None,
    dev: torch.device,
) -> ConversionReport:
    """fp32 safetensors weights (one file or a sharded directory) to half, tensor by
    tensor: MODEL is built on the meta device only to decide the islands."""
    from halfprec.io.stream import convert_file

    pol = Policy.load(policy) if policy is not None else None
    choice = resolve_dtype(requested or (pol.dtype if pol else "auto"), dev)
    keep = [*keep_fp32, *(pol.keep_fp32 if pol else [])]
    return convert_file(
        weights, output, lambda: load_model(model).model, choice.dtype, keep_fp32=keep
    )


@click.command(
    help="Convert MODEL to half precision and save it as safetensors. With --weights "
    "FILE.safetensors (or a sharded checkpoint directory) the conversion streams: MODEL is "
    "built on the meta device and tensors are converted one at a time."
)
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
    device: str,
    as_json: bool,
) -> None:
    if output.suffix != ".safetensors":
        raise click.UsageError(f"output {output} must end in .safetensors")
    dev = resolve_device(device)
    requested = None if (policy is not None and dtype == "auto") else dtype
    if weights is not None and (weights.suffix == ".safetensors" or weights.is_dir()):
        report = _stream(model, weights, output, requested, keep_fp32, policy, dev)
    else:
        loaded = load_model(model)
        if weights is not None:
            from halfprec.io.checkpoint import load

            load(weights, into=loaded.model)
        half = convert(
            loaded.model.to(dev),
            requested,
            keep_fp32=keep_fp32,
            policy=str(policy) if policy is not None else None,
        )
        save(half.cpu(), output)
        found = conversion_report(half)
        assert found is not None  # convert() always attaches its report
        report = found
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
