"""From a converted model and example batches to a ``torch.export`` program.

Every format starts here. Inputs are bound to the forward's parameter names, so the
artifact is called with keyword arguments in signature order whatever the batch looked
like. ``torch.export`` (non-strict) runs halfprec's hooks while tracing, so the program
holds the input casts, the fp32 islands with their casts, and the output casts.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from halfprec.batch import Args, Batch
from halfprec.errors import HalfprecError, InputsError, clip
from halfprec.export.config import ExportError
from halfprec.export.hf import plain_outputs
from halfprec.frames import is_library_file
from halfprec.modules import first_line
from halfprec.quiet_logs import quiet_logs
from halfprec.tree import map_tensors


def forward_params(model: nn.Module) -> tuple[str, ...]:
    """Names that positional inputs bind to, in order; rejects ``forward(*args)``."""
    sig = inspect.signature(model.forward)
    names = []
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            raise ExportError(
                f"{type(model).__name__}.forward takes *{p.name}; export needs named "
                "parameters: wrap the model in a module whose forward names its inputs"
            )
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
    return tuple(names)


def named_inputs(batch: Batch, params: tuple[str, ...]) -> dict[str, Any]:
    """``batch`` as keyword arguments, in the order of ``params`` (extra keywords last)."""
    if isinstance(batch, Args):
        args, kwargs = tuple(batch.args), dict(batch.kwargs)
    elif isinstance(batch, tuple):
        args, kwargs = batch, {}
    elif isinstance(batch, Mapping):
        args, kwargs = (), dict(batch)
    else:
        args, kwargs = (batch,), {}
    if len(args) > len(params):
        raise InputsError(
            f"the batch has {len(args)} positional inputs but forward names only "
            f"{len(params)} ({', '.join(params)}); pass them by name"
        )
    bound = dict(zip(params, args, strict=False))
    for key in kwargs:
        if key in bound:
            raise InputsError(f"input {key!r} is given both by position and by name")
    merged = {**bound, **kwargs}
    ordered = {p: merged[p] for p in params if p in merged}
    ordered.update({k: v for k, v in merged.items() if k not in ordered})
    return ordered


def _shape_spec(values: list[Any], first: Any) -> Any:
    """Dynamic-shape spec for one input across batches, with the structure of ``first``."""
    if isinstance(first, torch.Tensor):
        dims = {}
        for d, size in enumerate(first.shape):
            varies = any(
                not isinstance(v, torch.Tensor) or v.dim() != first.dim() or v.shape[d] != size
                for v in values
            )
            if size >= 2 and (d == 0 or varies):
                dims[d] = torch.export.Dim.DYNAMIC
        return dims or None
    if isinstance(first, Mapping):
        return {k: _shape_spec([v[k] for v in values], first[k]) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(_shape_spec([v[i] for v in values], x) for i, x in enumerate(first))
    return None


def dynamic_shapes(named_batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Symbolic batch dimension, plus every dimension that differs between the batches."""
    first = named_batches[0]
    same = [b for b in named_batches if set(b) == set(first)]
    return {k: _shape_spec([b[k] for b in same], v) for k, v in first.items()}


_NO_ONNX_OP = re.compile(r"No ONNX function found for <OpOverload\(op='([^']+)'")
_USER_LINE = re.compile(r'File "([^"]+)", line (\d+), in \w+|# File: (\S+?):(\d+) in \w+')
_UNKNOWN_OUTPUT = re.compile(r"Found <class '([\w.]+)'> in output, which is not a known type")


# model code whose export failure is a reported limit outside halfprec: (file, what and
# where it is reported)
_UPSTREAM = (
    (
        "transformers/time_series_utils.py",
        "torch.distributions validates its arguments with a data-dependent check, which "
        "non-strict torch.export cannot trace: https://github.com/pytorch/pytorch/issues/135061",
    ),
    (
        "models/autoformer/modeling_autoformer.py",
        "a transformers bug outside halfprec, not reported upstream: AutoformerAttention views "
        "its autocorrelation weights by the key length to add an attention mask, and "
        "transformers' masking_utils builds that mask only under torch.export (eager skips "
        "an all-valid one); plain fp32 torch.export fails alike. Past that mask, its "
        "forecasting head stops torch.export as for every transformers time-series model: "
        "torch.distributions' data-dependent argument check, "
        "https://github.com/pytorch/pytorch/issues/135061",
    ),
)


def _known(location: str) -> str:
    """Where the failure at ``location`` is a limit outside halfprec, why ("" if not)."""
    return next((why for place, why in _UPSTREAM if place in location), "")


def _locations(text: str) -> list[tuple[str, str]]:
    """(file, line) of every frame in ``text``, without code compiled from a string
    (``<string>``, ``<eval_with_key>``): no user can open those."""
    found = [
        (m.group(1) or m.group(3), m.group(2) or m.group(4)) for m in _USER_LINE.finditer(text)
    ]
    return [(f, n) for f, n in found if not f.startswith("<")]


def _user_location(text: str) -> str:
    """The last model-code location in an exporter message (not torch's or halfprec's)."""
    found = _locations(text)
    mine = [f"{f}:{n}" for f, n in found if not is_library_file(f) and "site-packages" not in f]
    return mine[-1] if mine else ""


def _model_location(text: str) -> str:
    """The last location outside torch and halfprec (model code, or transformers')."""
    user = _user_location(text)
    if user:
        return user
    found = [(f, n) for f, n in _locations(text) if not is_library_file(f) and "/torch/" not in f]
    if not found:
        return ""
    file, line = found[-1]
    # an installed package's file from its package folder on (transformers/models/...)
    shown = file.split("site-packages/")[-1] if "site-packages/" in file else Path(file).name
    return f"{shown}:{line}"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it wraps, outermost first."""
    found = [exc]
    while True:
        last = found[-1]
        inner = last.__cause__ or (None if last.__suppress_context__ else last.__context__)
        if inner is None or any(inner is e for e in found):
            return found
        found.append(inner)


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of ``exc``'s chain (exporters wrap the real error)."""
    return _chain(exc)[-1]


def explain_failure(stage: str, exc: BaseException, *, can_be_static: bool = True) -> str:
    """One line naming why ``stage`` failed (the root cause, plain text), and the fix."""
    text = "\n".join(str(e) for e in _chain(exc))
    # the frames the exceptions passed through, so a model line shows even when torch's
    # message names only the mode that made the call (halfprec's op policy)
    text += "\n" + "".join(
        line for e in _chain(exc) for line in traceback.format_tb(e.__traceback__)
    )
    op = _NO_ONNX_OP.search(text)
    if op:
        return (
            f"operator {op.group(1)} has no ONNX translation in torch.onnx; replace it in "
            "the model, register a custom translation, or export to a .pt2 file (-o NAME.pt2)"
        )
    unknown = _UNKNOWN_OUTPUT.search(text)
    if unknown:
        kind = unknown.group(1).rsplit(".", 1)[-1]
        return (
            f"{stage} cannot put the model's {kind} output in a graph; return tensors (or "
            "dicts/tuples of tensors) only; for a Hugging Face cache, set "
            "config.use_cache=False"
        )
    if "Constraints violated" in text or "specialized it to be a constant" in text:
        detail = next((ln.strip(" -") for ln in text.splitlines() if "marked" in ln), "")
        detail = detail.split(". ")[0].replace("L['", "").replace("']", "")
        return (
            f"the model does not export with dynamic shapes ({clip(detail, 200)}); export for "
            "the example shapes only with --static (dynamic=False), or make the model "
            "shape-generic"
        )
    if "data-dependent" in text.lower() or "GuardOnDataDependent" in text:
        location = _model_location(text)
        where = f" at {location}" if location else ""
        known = _known(location)
        return (
            f"{stage} cannot capture control flow that depends on tensor values{where}"
            f"{f' ({known})' if known else ''}; rewrite it with torch.where/torch.cond, or "
            "export to a .ts file (-o NAME.ts: a trace records the branch the example inputs "
            "take)"
        )
    if "Tracer cannot infer type" in text:
        last = [ln.strip(" :") for ln in text.splitlines() if ln.strip()][-1]
        return (
            f"TorchScript cannot trace this model's outputs ({clip(last, 160)}); return "
            "tensors, or dicts/tuples of tensors only, or export to a .pt2 file (-o NAME.pt2)"
        )
    root = root_cause(exc)
    location = _model_location(str(root)) or _model_location(text)
    where = f" (in {location})" if location else ""
    known = _known(location)
    if known:
        return f"{stage} failed: {first_line(root)}{where}: {known}"
    static = "with --static, or " if can_be_static else ""
    fix = f"; export {static}to a .pt2 file (-o NAME.pt2)" if "onnx" in stage else ""
    return f"{stage} failed: {first_line(root)}{where}{fix}"


_SPECIALIZED = re.compile(
    r"L\['(\w+)'\]\.size\(\)\[(\d+)\] as dynamic but your code specialized it to be a "
    r"constant \((\d+)\)"
)


def _specialized(exc: BaseException) -> list[tuple[str, int, int]]:
    """(input, dim, size) of each top-level input dimension that torch.export says the
    model's code fixed to a constant; [] when the failure is anything else."""
    text = "\n".join(str(e) for e in _chain(exc))
    return sorted({(m[1], int(m[2]), int(m[3])) for m in _SPECIALIZED.finditer(text)})


def _fixable(
    found: list[tuple[str, int, int]], named: list[dict[str, Any]], shapes: dict[str, Any]
) -> bool:
    """Whether every dimension in ``found`` can be exported at its example size: it has
    that size in every example batch (so every batch is still checked), and the program
    keeps at least one dynamic dimension (else it is a --static export, which the user
    asks for)."""
    for name, dim, size in found:
        spec = shapes.get(name)
        if not isinstance(spec, dict) or dim not in spec:
            return False
        for batch in named:
            t = batch.get(name)
            if not isinstance(t, torch.Tensor) or t.dim() <= dim or t.shape[dim] != size:
                return False
    dropped = {(n, d) for n, d, _ in found}
    return any(
        _has_dims(spec) if not isinstance(spec, dict) else any((k, d) not in dropped for d in spec)
        for k, spec in shapes.items()
    )


def _has_dims(spec: Any) -> bool:
    """Whether a (nested) dynamic-shape spec marks any dimension dynamic."""
    if isinstance(spec, dict):
        return any(isinstance(k, int) or _has_dims(v) for k, v in spec.items())
    if isinstance(spec, (list, tuple)):
        return any(_has_dims(v) for v in spec)
    return False


def capture_fixing(
    model: nn.Module, named: list[dict[str, Any]], shapes: dict[str, Any] | None, onnx: bool
) -> tuple[torch.export.ExportedProgram, list[str]]:
    """:func:`capture` of ``named[0]``; where the model's own code fixes an input dimension
    that is dynamic only because batches may vary (an image count a VLM unbinds), that
    dimension is exported at its example size, as transformers' own exporter does
    (``Dim.AUTO``), and named in the returned notes. A dimension that differs between the
    example batches, or a model whose every dynamic dimension is fixed, is refused."""
    fixed: list[tuple[str, int, int]] = []
    constants: dict[str, list[tuple[int, ...]]] = {}
    while True:
        try:
            program = capture(model, named[0], shapes, onnx=onnx, constants=constants)
        except ExportError as exc:
            if not constants and "depends on tensor values" in str(exc):
                constants = _geometry(named)
                if constants:
                    continue
            found = _specialized(exc)
            if not found or shapes is None or not _fixable(found, named, shapes):
                raise
            for name, dim, _ in found:
                shapes = {**shapes, name: {d: v for d, v in shapes[name].items() if d != dim}}
                shapes[name] = shapes[name] or None
            fixed += found
            continue
        notes = [
            f"{name} dimension {dim} is fixed at {size}: the model's code specialises it under "
            "torch.export (inputs with another size are refused by the file)"
            for name, dim, size in fixed
        ]
        notes += [
            f"{name} is fixed at {rows}: the model's code branches on its values, so it is "
            "exported as those constants, as transformers' own exporter does (the program "
            "refuses other values)"
            for name, rows in constants.items()
        ]
        return program, notes


# per-image geometry that transformers' own exporter passes as Python ints, because
# vision-language models branch on its values (LLaVA-NeXT's any-resolution tiling)
_GEOMETRY = ("image_sizes",)


def _geometry(named: list[dict[str, Any]]) -> dict[str, list[tuple[int, ...]]]:
    """Each :data:`_GEOMETRY` input that is an integer tensor with the same values in every
    example batch, as rows of Python ints ({} if none): every batch is still checked."""
    found: dict[str, list[tuple[int, ...]]] = {}
    for name in _GEOMETRY:
        values = [b.get(name) for b in named]
        first = values[0]
        if not isinstance(first, torch.Tensor) or first.is_floating_point() or first.dim() != 2:
            continue
        if all(isinstance(v, torch.Tensor) and torch.equal(v, first) for v in values):
            found[name] = [tuple(int(x) for x in row) for row in first.tolist()]
    return found


def capture(
    model: nn.Module,
    named: dict[str, Any],
    shapes: dict[str, Any] | None,
    onnx: bool = False,
    constants: dict[str, list[tuple[int, ...]]] | None = None,
) -> torch.export.ExportedProgram:
    """``torch.export`` the model (non-strict, so halfprec's hooks are traced); ``onnx``:
    for an ONNX file, whose attention must zero fully masked rows as aten does
    (:mod:`halfprec.export.attention`); ``constants``: inputs passed to the model as these
    Python ints (:func:`~halfprec.export.hf.plain_outputs`)."""
    from halfprec.export.attention import aten_masked_rows

    # torch.export marks the example tensors it sees as dynamic; give it copies so a
    # second export of the same batch (say, a static one after a failure) starts clean.
    fresh = map_tensors(lambda t: t.detach().clone(), named)
    model = plain_outputs(model, list(fresh), constants)
    try:
        with (  # a failure is explained below: torch's logs and its partial graph printed
            warnings.catch_warnings(),  # to stderr (1000+ lines) are not shown
            quiet_logs("torch.fx.experimental.symbolic_shapes", "torch.export"),
            contextlib.redirect_stderr(io.StringIO()),
            aten_masked_rows() if onnx else contextlib.nullcontext(),
        ):
            warnings.simplefilter("ignore")
            return torch.export.export(model, (), kwargs=fresh, dynamic_shapes=shapes, strict=False)
    except HalfprecError:
        raise
    except Exception as exc:  # torch.export raises many unrelated types
        raise ExportError(explain_failure("torch.export", exc)) from exc
