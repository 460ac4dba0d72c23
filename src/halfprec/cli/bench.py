"""``halfprec bench``: fp32, naive, autocast and halfprec side by side: speed, memory,
accuracy; JSON and a PNG chart."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from halfprec.bench.budget import BENCH_BUDGET_S, PROCESS_BUDGET_S, process_start
from halfprec.cli.options import (
    NumberRange,
    budget_option,
    convert_options,
    device_option,
    finish,
    from_flags,
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
    from halfprec.bench.results import BenchConfig, BenchResult, VariantResult
    from halfprec.bench.variants import Variant
    from halfprec.convert.recipe import Recipe


def _batch_sizes(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(s < 1 for s in sizes):
        raise HalfprecError(
            f"--batch-sizes {text!r} is not a list of positive integers; write e.g. 1,8,32"
        )
    if max(sizes) > _MAX_BATCH:  # refused up front, not as a MemoryError mid-run
        raise HalfprecError(
            f"--batch-sizes {max(sizes)} is over the largest batch halfprec times "
            f"({_MAX_BATCH}); write e.g. 1,8,32"
        )
    return sizes


_MAX_BATCH = 2**20
QUICK_RUNS = 3


def _quick_settings(runs: int, warmup: int, budget_s: float) -> tuple[int, int, float]:
    """--quick's rounds and budget: fewer runs, one warm-up and ``halfprec deploy``'s time
    budget, where the flags were not given."""
    ctx = click.get_current_context()
    given = {
        name
        for name in ("runs", "warmup", "budget_s")
        if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT
    }
    return (
        runs if "runs" in given else QUICK_RUNS,
        warmup if "warmup" in given else 1,
        budget_s if "budget_s" in given else PROCESS_BUDGET_S,
    )


def _quick_note(runs: int, warmup: int, budget_s: float) -> str:
    budget = f"a {budget_s:g} s time budget" if budget_s else "no time budget"
    return (
        f"quick run (--quick): {runs} timed runs, {warmup} warm-up, {budget}, no memory and "
        "no GEMM limit measured; speedups are rougher than a full bench (leave out --quick)"
    )


def _list_variants(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--list-variants``: print every way of running a model, and exit."""
    if value and not ctx.resilient_parsing:
        from halfprec.bench.ways import WAYS
        from halfprec.report.ways import ways_text

        click.echo(ways_text(WAYS.values()))
        ctx.exit(0)


@click.command(help="Time MODEL in fp32 and each half-precision variant.")
@model_argument
@inputs_option
@convert_options
@device_option
@json_option
@click.option(
    "--batch-sizes",
    default=None,
    show_default="the example batch's own size",
    help="Comma-separated, e.g. 1,8,32.",
)
@click.option(
    "--variants",
    default=None,
    show_default="those of --dtype; auto: all",
    help="Comma-separated: fp32, naive-fp16, naive-bf16, "
    "autocast-fp16, autocast-bf16, halfprec-fp16, halfprec-bf16; runtimes on CPU: "
    "openvino-fp32, openvino-bf16, openvino-fp16, onnxruntime-fp32.",
)
@click.option(
    "--list-variants",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_list_variants,
    help="List every way of running a model (what --variants takes), and exit.",
)
@click.option(
    "--compile/--no-compile",
    "use_compile",
    default=False,
    help="Add a torch.compile twin of each variant given to --variants, or without "
    "--variants, of each that deploy may choose.",
)
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a PNG chart of speedup and memory per variant.",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=10,
    help="Most timed rounds per variant (the race stops a settled one sooner).",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=1),
    default=2,
    help="Untimed calls of each variant before its timed ones.",
)
@click.option(
    "--quick",
    is_flag=True,
    help=f"A rough answer fast: {QUICK_RUNS} runs, 1 warm-up and deploy's "
    f"{PROCESS_BUDGET_S:g} s budget (unless --runs/--warmup/--budget are given), no memory "
    "subprocesses, no GEMM limit; the output says so.",
)
@budget_option(BENCH_BUDGET_S)
@click.option(
    "--max-call-s",
    type=NumberRange(min=0, min_open=True),
    default=10.0,
    help="Time a variant once when one call takes longer.",
)
@click.option(
    "--skip-slower-than",
    type=NumberRange(min=0, min_open=True),
    default=3.0,
    help="Skip a half dtype whose matmul probe runs this many times slower than fp32 "
    "(probed in seconds; --no-skip times every dtype, however slow).",
)
@click.option("--no-skip", is_flag=True, help="Time every half dtype, however slow here.")
@click.option("--no-limit", is_flag=True, help="Do not time the model's GEMMs for the limit.")
@click.option(
    "--no-race",
    is_flag=True,
    help="Time every variant --runs times; without it, a variant stops once its rank is "
    "settled by its spread.",
)
@click.option(
    "--no-probe-cache",
    is_flag=True,
    help="Probe the half dtypes again instead of using this machine's cached verdicts "
    "(kept in $HALFPREC_CACHE_DIR, else ~/.cache/halfprec).",
)
@click.option("--no-memory", is_flag=True, help="Skip the per-variant memory subprocesses.")
@click.option(
    "--compiled-memory",
    is_flag=True,
    help="Also measure compiled variants' CPU memory (each subprocess compiles again).",
)
@tolerance_options
def command(
    model: str,
    inputs_path: Path | None,
    recipe: Recipe,
    device: str | None,
    as_json: bool,
    batch_sizes: str | None,
    variants: str | None,
    use_compile: bool,
    plot: Path | None,
    runs: int,
    warmup: int,
    quick: bool,
    budget_s: float,
    max_call_s: float,
    skip_slower_than: float,
    no_skip: bool,
    no_limit: bool,
    no_race: bool,
    no_probe_cache: bool,
    no_memory: bool,
    compiled_memory: bool,
    min_cosine: float | None,
    min_sqnr: float | None,
) -> None:
    from halfprec.bench.runner import benchmark
    from halfprec.bench.spread import spread_json
    from halfprec.report.bench import print_bench, write_chart

    # Everything that can be wrong with the arguments fails here, before any measuring.
    sizes = _batch_sizes(batch_sizes)
    if quick:
        runs, warmup, budget_s = _quick_settings(runs, warmup, budget_s)
        no_memory = no_limit = True
    chosen = _chosen_variants(variants, use_compile)
    _check_plot(plot, model, inputs_path)
    loaded, batches, dev = load_for_command(model, inputs_path, device)
    recipe = with_tolerance_flags(recipe, min_cosine, min_sqnr)
    # The memory worker rebuilds the model from its spec; custom --inputs cannot follow it.
    spec = None if (no_memory or inputs_path is not None) else model
    with from_flags():
        config = _config(
            batch_sizes=sizes,
            warmup=warmup,
            runs=runs,
            max_call_s=max_call_s,
            skip_slower_than=None if no_skip else skip_slower_than,
            limit=not no_limit,
            race=not no_race,
            probe_cache=not no_probe_cache,
            compiled_memory=compiled_memory,
            budget_s=budget_s or None,
        )
    progress = None if as_json else _Progress()
    with progress if progress is not None else contextlib.nullcontext():
        result = benchmark(
            loaded.model,
            batches,
            recipe,
            bench=config,
            variants=chosen,
            compile=use_compile,
            spec=spec,
            name=loaded.name,
            progress=progress.update if progress else None,
            row_done=progress.row_done if progress else None,
        )
    if plot is not None:
        write_chart([result], plot)
    shown = (runs, warmup, budget_s) if quick else None
    notes = _footer(result, shown, use_compile and not variants)

    def render() -> None:
        print_bench(result)
        for line in notes.values():
            click.echo(line)
        if plot is not None:
            click.echo(f"chart: {plot}")

    finish({**spread_json(result), **notes}, as_json, render)


def _footer(
    result: BenchResult, quick: tuple[int, int, float] | None, compile_default: bool
) -> dict[str, str]:
    """The lines under the table by their JSON key: what a --quick run (its runs, warm-up
    and budget), a default --compile run and the time budget left out."""
    from halfprec.bench.budget import left_out

    notes = {"quick": _quick_note(*quick)} if quick is not None else {}
    uncompiled = _compile_note(result) if compile_default else None
    if uncompiled:
        notes["not_compiled"] = uncompiled
    late = left_out(result.results)
    if late:
        notes["budget"] = late
    return notes


def _compile_note(result: BenchResult) -> str | None:
    """Which ``+compile`` twins a default ``--compile`` run left out, of variants that ran."""
    from halfprec.bench.variants import compile_note

    ran = dict.fromkeys(r.variant for r in result.results if r.status != "skipped")
    return compile_note(list(ran))


def _check_plot(plot: Path | None, model: str, inputs_path: Path | None) -> None:
    """``--plot``: a .png path that is no input, with matplotlib installed, before any work
    (nothing without it)."""
    if plot is None:
        return
    from halfprec.report.bench import check_plot_path
    from halfprec.report.plot import require_matplotlib

    check_plot_path(plot)
    not_an_input(plot, model, {"--inputs": inputs_path}, flag="--plot")
    require_matplotlib()


def _chosen_variants(variants: str | None, use_compile: bool) -> list[Variant] | None:
    """``--variants`` parsed (None: the default list, which omitting the flag gives)."""
    from halfprec.bench.variants import parse_variants

    names = [v for v in variants.split(",") if v.strip()] if variants is not None else None
    if names == []:  # "" or ",": not the default list, which is what omitting the flag gives
        raise HalfprecError(
            f"--variants {variants!r} names no variant; write e.g. fp32,halfprec-bf16, or "
            "leave the flag out for the default list"
        )
    return parse_variants(names, compile=use_compile) if names else None


def _config(*, race: bool, **fields: Any) -> BenchConfig:
    """The :class:`~halfprec.BenchConfig` of the flags (its checks are the flags' checks),
    its budget counted from the process's start, as ``halfprec deploy``'s."""
    from halfprec.bench.race import Race
    from halfprec.bench.results import BenchConfig

    return BenchConfig(race=Race() if race else None, budget_origin=process_start(), **fields)


class _Progress:
    """bench's progress on stderr: a line per variant and batch size as each finishes (its
    status, cosine and seconds), and on a terminal a transient bar naming the one at work."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.console = Console(stderr=True, highlight=False)
        self.bar = Progress(
            TextColumn("[bold]bench[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            console=self.console,
            transient=True,
        )
        self.task = self.bar.add_task("", total=None)
        self.step, self.total, self.started = 0, 0, time.perf_counter()

    def update(self, step: int, total: int, label: str) -> None:
        self.step, self.total, self.started = step + 1, total, time.perf_counter()
        self.bar.update(self.task, completed=step, total=total, description=label)

    def row_done(self, row: VariantResult) -> None:
        from halfprec.report.bench import progress_line

        seconds = time.perf_counter() - self.started
        self.console.print(progress_line(row, self.step, self.total, seconds), markup=False)

    def __enter__(self) -> _Progress:
        if self.console.is_terminal:  # piped, the bar would only leave a blank line
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar.live.is_started:
            self.bar.stop()
