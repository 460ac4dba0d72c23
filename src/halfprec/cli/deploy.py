"""``halfprec deploy``: choose the fastest checked way to run MODEL here and write it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from halfprec.atomic import ensure_folder
from halfprec.bench.budget import PROCESS_BUDGET_S, PROCESS_END_S, process_start
from halfprec.cli.options import (
    budget_option,
    convert_options,
    device_option,
    finish,
    inputs_option,
    json_option,
    load_for_command,
    model_argument,
    not_an_input,
    tolerance_options,
    with_tolerance_flags,
)
from halfprec.errors import HalfprecError

if TYPE_CHECKING:
    from halfprec.bench.deploy import Deployed
    from halfprec.convert.recipe import Recipe


def _runtimes(text: str | None) -> tuple[str, ...] | None:
    """``--runtimes``: None (the installed ones that compute a half dtype here), ``()``
    for none, else the names given."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if names == ("none",):
        return ()
    if not names or "none" in names:
        raise HalfprecError(
            f"--runtimes {text!r}: give none, all, or names such as openvino,onnxruntime"
        )
    return names


@click.command(
    help="Choose the fastest way to run MODEL on this device that stays within tolerance "
    "of fp32, and write it to -o: a .safetensors checkpoint or a "
    "folder (a Hugging Face directory as MODEL) for a choice run by torch, an .xml OpenVINO "
    "IR or an .onnx file for a runtime's choice. A compiled choice is written as the module "
    "it compiled: compile it again after loading. Prints the choice, its speedup over fp32 "
    "with its spread, and its accuracy."
)
@model_argument
@inputs_option
@convert_options
@device_option
@json_option
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="Where to write the choice: NAME.safetensors, a folder, NAME.xml or NAME.onnx.",
)
@click.option(
    "--compile/--no-compile",
    "use_compile",
    default=True,
    help="Also try each variant under torch.compile (compiling takes minutes).",
)
@click.option(
    "--runtimes",
    default=None,
    show_default="those installed that compute a half dtype on this CPU",
    help="Runtimes to try, comma-separated: openvino, onnxruntime, all, or none.",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=3,
    help="Timed rounds planned per variant (the race stops a settled one sooner; the "
    "leader runs on until its claim's 2 s of calls).",
)
@budget_option(
    PROCESS_BUDGET_S,
    f" The last {PROCESS_END_S:g} s are kept for writing the choice and exiting.",
)
@tolerance_options
def command(
    model: str,
    inputs_path: Path | None,
    recipe: Recipe,
    device: str | None,
    as_json: bool,
    output: Path,
    use_compile: bool,
    runtimes: str | None,
    runs: int,
    budget_s: float,
    min_cosine: float | None,
    min_sqnr: float | None,
) -> None:
    from halfprec.bench.deploy_save import deploy_to, output_problem
    from halfprec.bench.results import BenchConfig

    chosen_runtimes = _runtimes(runtimes)
    problem = output_problem(output, chosen_runtimes)  # before the model loads
    if problem is not None:
        raise click.UsageError(problem)
    not_an_input(output, model, {"--inputs": inputs_path})
    _writable(output)  # a path that cannot be written, before minutes of timing
    loaded, batches, _dev = load_for_command(model, inputs_path, device)
    recipe = with_tolerance_flags(recipe, min_cosine, min_sqnr)
    source = model if Path(model).is_dir() else None
    done = deploy_to(
        output,
        loaded.model,
        batches,
        source=source,
        runtimes=chosen_runtimes,
        notice=lambda line: click.echo(f"deploy: {line}", err=True),
        recipe=recipe,
        compile=use_compile,
        bench=BenchConfig(
            warmup=1,
            runs=runs,
            memory="none",
            max_variant_s=15.0,
            budget_s=budget_s or None,
            budget_origin=process_start(),
            budget_reserve_s=PROCESS_END_S if budget_s else 0.0,
        ),
    )
    finish({"output": str(output), **done.to_json()}, as_json, lambda: _render(done, output))


def _writable(output: Path) -> None:
    """Refuse an ``-o`` that no choice could be written to: a folder output that exists and
    is not empty, a file output that is a folder, a path under a file."""
    if output.suffix == "":
        from halfprec.io.hf_dir import check_new_folder

        check_new_folder(output)
    else:
        ensure_folder(output)


def _render(done: Deployed, output: Path) -> None:
    from halfprec.report.common import make_console

    con = make_console()
    con.print(f"wrote {output}: {done.variant} (run by {done.runtime})")
    con.print(f"  {done.summary}")
    comparison = done.choice.comparison
    if done.variant == "fp32":
        con.print("  accuracy: fp32 itself, the reference")
    elif comparison is not None:
        verdict = "PASS" if comparison.passed else "FAIL"
        con.print(f"  accuracy against fp32: {verdict} ({comparison.reason})")
    if done.compile_s is not None:
        con.print("  written uncompiled: compile it after loading (a compiled graph is no file)")
    con.print(f"  {done.time_spent}")
    if done.cpu_spent:
        con.print(f"  {done.cpu_spent}")
