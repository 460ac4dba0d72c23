"""Options and loaders shared by the commands, so that a flag means one thing everywhere.

``--dtype``, ``--recipe``, ``--keep-fp32`` and ``--no-norm-islands`` become one
:class:`~halfprec.Recipe` (:func:`convert_options`); ``--min-cosine`` and
``--min-sqnr`` replace one threshold each of that recipe's tolerance
(:func:`tolerance_options`, :func:`with_tolerance_flags`), and the library settles it
(:meth:`~halfprec.Recipe.settle`); ``--device`` defaults to cuda when
present, else cpu; every command ends through :func:`finish`. docs/cli.md lists them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from halfprec.cli import EXIT_FAILED, EXIT_OK
from halfprec.errors import HalfprecError, InputsError

if TYPE_CHECKING:  # the commands import torch and the library when they run, not to parse
    import torch

    from halfprec.batch import Batch
    from halfprec.convert.recipe import Recipe
    from halfprec.io.specs import LoadedModel

__all__ = [
    "DEFAULT_MODEL",
    "budget_option",
    "model_argument",
    "DTYPES",
    "DTypeParam",
    "dtype_option",
    "convert_options",
    "make_recipe",
    "tolerance_options",
    "device_option",
    "inputs_option",
    "json_option",
    "weights_option",
    "load_for_command",
    "with_tolerance_flags",
    "finish",
    "from_flags",
    "NumberRange",
    "not_an_input",
]

DEFAULT_MODEL = "builtin:minilm"
F = TypeVar("F", bound=Callable[..., Any])


def _known_model(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """MODEL refused at once when its text alone shows it names nothing (an unknown
    built-in, a missing file), before torch and the model load."""
    from halfprec.io.spec_names import spec_problem

    problem = spec_problem(value)
    if problem is not None:
        raise click.BadParameter(problem, ctx, param)
    return value


def model_argument(f: F) -> F:
    """``[MODEL]``, the same optional argument in every command; builtin:minilm if left out."""
    return click.argument(
        "model", required=False, default=DEFAULT_MODEL, metavar="[MODEL]", callback=_known_model
    )(f)


DTYPES: tuple[str, ...] = ("auto", "fp16", "bf16")
_TORCH_NAMES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
"""torch's own names of the half dtypes (``torch.float16``, ``torch.half``, ...)."""


class DTypeParam(click.Choice):
    """``--dtype``: auto, fp16 or bf16 (or torch's names, float16, half, bfloat16, with or
    without ``torch.``), checked before any model loads."""

    name = "dtype"

    def __init__(self) -> None:
        super().__init__(DTYPES, case_sensitive=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip().lower().removeprefix("torch.")
        try:
            return super().convert(_TORCH_NAMES.get(text, text), param, ctx)
        except click.BadParameter:
            known = ", ".join([*DTYPES, *_TORCH_NAMES])
            self.fail(f"unknown dtype {value!r}; use one of: {known}", param, ctx)


def dtype_option(f: F, *, default: str = "the --recipe's dtype, else auto") -> F:
    """``--dtype``; ``default`` says what an absent one means (a command with no
    ``--recipe`` passes ``"auto"``), shown as click shows every default."""
    return click.option(
        "--dtype",
        type=DTypeParam(),
        default=None,
        show_default=default,
        help="auto (bf16 where it has fast kernels, else fp16 where that is fast, else bf16), "
        "fp16 (float16, half) or bf16 (bfloat16).",
    )(f)


def _islands_options(f: F) -> F:
    f = click.option(
        "--no-op-policy",
        is_flag=True,
        help="Run autocast's fp32-list ops (exp, softmax, sum, ...) in half too and cast "
        "inputs at the model's entry; without it those ops compute in fp32 and inputs stay "
        "fp32 until a half module or GEMM takes them, as under autocast.",
    )(f)
    f = click.option(
        "--no-norm-islands",
        is_flag=True,
        help="Convert norm layers too (without it they stay fp32); modules whose weights "
        "overflow the dtype still stay fp32.",
    )(f)
    f = click.option(
        "--keep-fp32", multiple=True, help="Module name or glob to keep in fp32 (repeatable)."
    )(f)
    return click.option(
        "--recipe",
        "recipe_file",
        type=click.Path(path_type=Path),
        default=None,
        help="Recipe JSON written by `halfprec tune -o` (its dtype, module and op islands, "
        "tolerance).",
    )(f)


@contextlib.contextmanager
def from_flags() -> Iterator[None]:
    """Build configs from command-line flags inside this block: a config's ``ValueError``
    (its ``__post_init__`` check) is then the user's input error, exit 2, not a bug."""
    try:
        yield
    except HalfprecError:
        raise
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def make_recipe(
    dtype: str | None,
    recipe_file: Path | None = None,
    keep_fp32: tuple[str, ...] = (),
    no_norm_islands: bool = False,
    no_op_policy: bool = False,
) -> Recipe:
    """The :class:`~halfprec.Recipe` the conversion flags stand for: the recipe file's,
    with an explicit --dtype winning over its dtype and --keep-fp32 added to its islands."""
    from halfprec.convert.recipe import Recipe

    base = Recipe.load(recipe_file) if recipe_file is not None else Recipe()
    changes: dict[str, Any] = {"keep_fp32": (*base.keep_fp32, *keep_fp32)}
    if dtype is not None:
        changes["dtype"] = dtype
    if no_norm_islands:
        changes["norm_islands"] = False
    if no_op_policy:
        changes["fp32_ops"] = ()
        changes["fp32_inputs"] = False
    with from_flags():
        return base.replace(**changes)


_RECIPE_FILE = "halfprec.recipe_file"


def convert_options(f: F) -> F:
    """``--dtype``, ``--recipe``, ``--keep-fp32`` and ``--no-norm-islands``, handed to the
    command as one ``recipe`` argument (parsed before the model loads)."""

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        dtype: str | None,
        recipe_file: Path | None,
        keep_fp32: tuple[str, ...],
        no_norm_islands: bool,
        no_op_policy: bool,
        **kwargs: Any,
    ) -> Any:
        kwargs["recipe"] = make_recipe(dtype, recipe_file, keep_fp32, no_norm_islands, no_op_policy)
        ctx = click.get_current_context(silent=True)
        if ctx is not None:  # for not_an_input: the recipe file is an input
            ctx.meta[_RECIPE_FILE] = recipe_file
        return f(*args, **kwargs)

    return dtype_option(_islands_options(wrapper))  # type: ignore[return-value]


class NumberRange(click.FloatRange):
    """A float flag in a range that also refuses NaN, which every comparison lets through
    (``nan <= 0`` is False), so a NaN limit would turn its check off."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(
                f"{value!r} is not a number; give a value {self._describe_range()}", param, ctx
            )
        return number


def tolerance_options(f: F) -> F:
    """``--min-cosine`` and ``--min-sqnr``: each overrides its own threshold only."""
    f = click.option(
        "--min-sqnr",
        type=float,
        default=None,
        show_default="the --recipe's, else the dtype's: 25 fp16, 20 bf16",
        help="Minimum SQNR in dB.",
    )(f)
    return click.option(
        "--min-cosine",
        type=NumberRange(-1.0, 1.0),
        default=None,
        show_default="the --recipe's, else 0.999",
        help="Minimum cosine similarity.",
    )(f)


def budget_option(seconds: float, counted: str = "") -> Callable[[F], F]:
    """``--budget``, one option for bench and deploy: the seconds the command may start
    variants in, counted from the process's start (``seconds``: the command's default;
    ``counted``: a sentence of help the command adds); NaN refused as for every float
    flag."""
    return click.option(
        "--budget",
        "budget_s",
        type=NumberRange(min=0),
        default=seconds,
        help="Seconds to start variants in: a compile estimated past what is left, and any "
        "variant (or bench's memory subprocess) once they are spent, is skipped and named; "
        "0 for no bound. They count from this process's start (imports and the model's load "
        f"are charged).{counted}",
    )


def device_option(f: F) -> F:
    return click.option(
        "--device",
        default=None,
        show_default="cuda if present, else cpu",
        help="cpu, cuda or cuda:N.",
    )(f)


def inputs_option(f: F) -> F:
    return click.option(
        "--inputs",
        "inputs_path",
        type=click.Path(path_type=Path),
        default=None,
        show_default="the model's own examples",
        help="Example inputs (.safetensors or .pt).",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(f)


def weights_option(f: F) -> F:
    return click.option(
        "--weights",
        type=click.Path(path_type=Path),
        default=None,
        help="Weights to load first: fp32 (.safetensors, or .pt/.bin read weights-only), or "
        "a halfprec half checkpoint, upcast to fp32 (compare with --recipe to check it).",
    )(f)


def with_tolerance_flags(
    recipe: Recipe, min_cosine: float | None, min_sqnr: float | None
) -> Recipe:
    """``recipe`` with ``--min-cosine``/``--min-sqnr`` in its tolerance: each flag given
    replaces its one threshold; every other threshold stays as the recipe has it (one left
    to the default still follows the dtype it is judged in). The verb then settles the
    recipe (:meth:`~halfprec.Recipe.settle`)."""
    given = {"min_cosine": min_cosine, "min_sqnr_db": min_sqnr}
    changes = {name: value for name, value in given.items() if value is not None}
    if not changes:
        return recipe
    with from_flags():
        return recipe.replace(tolerance=dataclasses.replace(recipe.tolerance, **changes))


def load_for_command(
    spec: str, inputs_path: Path | None, device: str | None, weights: Path | None = None
) -> tuple[LoadedModel, list[Batch], torch.device]:
    """Resolve MODEL (plus --weights) and its batches, on the chosen device."""
    from halfprec.dtypes import resolve_device
    from halfprec.io.inputs import load_inputs
    from halfprec.io.specs import load_model
    from halfprec.tree import map_tensors

    dev = resolve_device(device)
    loaded = load_model(spec)
    for note in loaded.notes:  # on stderr: a --json report on stdout stays JSON
        click.echo(f"note: {note}", err=True)
    if weights is not None:
        from halfprec.io.checkpoint import load

        load(weights, into=loaded.model, upcast=True)  # a half file: its fp32 upcast
    batches = load_inputs(inputs_path) if inputs_path is not None else loaded.example_inputs
    if not batches and loaded.no_inputs:
        from halfprec.io.inputs import INPUTS_FORMAT

        raise InputsError(f"{loaded.no_inputs}: pass --inputs FILE, {INPUTS_FORMAT}")
    if not batches:
        raise InputsError(
            f"{spec} has no example inputs; pass --inputs FILE (.safetensors or .pt), or "
            "define example_inputs() next to the factory"
        )
    if inputs_path is None and loaded.inputs_built:
        _note_built_inputs(loaded)
    loaded.model.to(dev)
    moved = [map_tensors(lambda t: t.to(dev), b) for b in batches]
    return loaded, moved, dev


def _note_built_inputs(loaded: LoadedModel) -> None:
    """Tell the command's error handler that halfprec built these inputs (from what), so
    that an fp32 failure on them reads as halfprec's, not as advice on the user's inputs."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        obj = ctx.find_root().ensure_object(dict)
        obj["inputs_built"] = "; ".join(loaded.inputs_built)


def finish(
    data: dict[str, Any], as_json: bool, render: Callable[[], None], passed: bool = True
) -> NoReturn:
    """The one way a command ends: print ``data`` as JSON or call ``render`` for tables,
    then exit 0 if ``passed`` else 1. (Bad input raises HalfprecError instead: exit 2.)"""
    if as_json:
        from halfprec.report.json_text import to_json_text

        click.echo(to_json_text(data))
    else:
        render()
    raise click.exceptions.Exit(EXIT_OK if passed else EXIT_FAILED)  # a SystemExit is the model's


def not_an_input(
    output: Path,
    model: str | None = None,
    inputs: dict[str, Path | None] | None = None,
    *,
    flag: str = "-o",
) -> None:
    """Refuse, before any work, an output path that is or lies inside one of the command's
    inputs (MODEL's file or folder, ``--weights``, ``--inputs``, ``--recipe`` and any other
    given as ``inputs``), or a folder output that holds one, links resolved: writing it
    would replace the input."""
    given: dict[str, Path | None] = dict(inputs or {})
    if model is not None:
        from halfprec.io.specs import model_path

        given["MODEL"] = model_path(model)
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(_RECIPE_FILE) is not None:
        given["--recipe"] = ctx.meta[_RECIPE_FILE]
    out = _real(output, flag)
    for name, path in given.items():
        if path is None:
            continue
        real = _real(Path(path), name)
        kind = "folder" if real.is_dir() else "file"
        if out == real:
            where = f"is the {name} {kind}"
        elif real in out.parents:
            where = f"is inside the {name} {kind} {path}"
        elif out in real.parents:
            where = f"holds the {name} {kind} {path}"
        else:
            continue
        raise click.UsageError(
            f"{flag} {output} {where}, which the output would replace; write it to another path"
        )


def _real(path: Path, flag: str) -> Path:
    """``path`` with every link resolved; a link loop is the user's error (exit 2)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise click.UsageError(
                f"{flag} {path} is a symbolic link loop; give a real path"
            ) from None
    return Path(os.path.realpath(path))
