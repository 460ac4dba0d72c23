"""The public :func:`diagnose` (see :mod:`halfprec.diagnose`) and :func:`naive_half`, the
half model it examines by default."""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torch import nn

from halfprec.batch import as_batches
from halfprec.compare import compare_outputs, reference_failed
from halfprec.convert.core import conversion_report, convert
from halfprec.convert.recipe import Recipe, RecipeLike
from halfprec.diagnose.divergence import find_divergence, half_pass
from halfprec.diagnose.inputs import input_rounding
from halfprec.diagnose.local import Diagnoser
from halfprec.diagnose.results import Diagnosis
from halfprec.dtypes import cast_floating
from halfprec.errorstats import relative_threshold
from halfprec.fp32 import exact_fp32
from halfprec.modules import model_device
from halfprec.tolerance import Tolerance
from halfprec.tree import map_tensors


def naive_half(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``model.to(dtype)`` on a copy, floating inputs cast at the root: the naive conversion."""
    twin = copy.deepcopy(model).to(dtype)
    cast = cast_floating(dtype)

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        return map_tensors(cast, args), map_tensors(cast, kwargs)

    twin.register_forward_pre_hook(hook, with_kwargs=True)
    return twin


def _model_dtype_for(model: nn.Module, half: nn.Module | None, recipe: Recipe | None) -> Any:
    if half is not None and recipe is None:
        report = conversion_report(half)
        if report is not None:
            return report.dtype
        found = next((p.dtype for p in half.parameters() if p.is_floating_point()), None)
        if found is not None:
            return found
    device = model_device(model)
    return (recipe or Recipe()).resolve(device).dtype


def _half_model(model: nn.Module, recipe: Recipe | None, dtype: torch.dtype) -> nn.Module:
    """The half model to examine when none is given: ``recipe``'s conversion where it asks
    for more than a dtype and a tolerance (islands, op islands, flags, a ``filter_fn``),
    else the naive ``model.to(dtype)`` copy."""
    if recipe is None:
        return naive_half(model, dtype)
    bare = Recipe(dtype=recipe.dtype, tolerance=recipe.tolerance)
    if recipe == bare and recipe.filter_fn is None:
        return naive_half(model, dtype)
    return convert(model, recipe.replace(dtype=dtype))


def diagnose(
    model: nn.Module,
    inputs: Any,
    recipe: RecipeLike = None,
    *,
    half: nn.Module | None = None,
    tolerance: Tolerance | None = None,
) -> Diagnosis:
    """Diagnose ``model`` in half precision on ``inputs`` (one batch, or a list of batches).

    ``recipe``: a :class:`Recipe`, a dtype or a recipe file (``"auto"`` by default; the
    dtype is taken from ``half`` when ``half`` is given and ``recipe`` is not).
    ``half``: the half model to examine, with the same module names; default: the recipe's
    conversion where it names islands, op islands or boundary flags (``convert(model,
    recipe)``), else a naive ``model.to(dtype)`` copy, which is what breaks for most users.
    ``tolerance`` (default: the recipe's) judges the outputs and sets the divergence
    threshold (relative error ``10**(-min_sqnr_db/20)``).
    ``model`` is not changed; its train/eval mode is used as is.
    """
    start = time.perf_counter()
    batches = as_batches(inputs)
    given = Recipe.of(recipe) if recipe is not None else None  # read once (it may be a file)
    dt = _model_dtype_for(model, half, given)
    tol = (given or Recipe()).settle(model_device(model), tolerance).judge(dt)
    threshold = relative_threshold(tol.min_sqnr_db)
    half_model = half if half is not None else _half_model(model, given, dt)
    label = "converted" if conversion_report(half_model) is not None else "naive"
    if half is not None and label == "naive":
        label = "given"
    d = Diagnoser(model, half_model, dt, threshold)
    divergence = None
    ref_outs: list[Any] = []
    all_refs: list[Any] = []
    half_outs: list[Any] = []
    problems: list[str] = []
    with torch.no_grad():  # not inference_mode: snapshots read tensors' version counters
        for i, batch in enumerate(batches):
            try:
                with exact_fp32():  # the reference is IEEE fp32 whatever the process set
                    calls, ref_out = d.fp32_pass(batch)
            except Exception as exc:  # the user's forward() on these inputs
                raise reference_failed(i, batch, exc) from exc
            all_refs.append(ref_out)
            by_key = {(c.name, c.nth): c for c in calls}
            out, events, raised = half_pass(d, batch, by_key)
            if divergence is None:
                divergence = find_divergence(d, i, calls, events, raised)
            if raised is not None:
                problems.append(f"batch {i}: the half model raised {raised[1]}")
            else:
                ref_outs.append(ref_out)
                half_outs.append(out)
            del calls, by_key
    output = compare_outputs(ref_outs, half_outs, tolerance=tol, dtype=dt)
    output.problems.extend(problems)
    output.batches = len(batches)
    modules = sorted(d.modules.values(), key=lambda m: m.index)
    rounding = input_rounding(model, batches, all_refs, dt, tol)
    return Diagnosis(
        dtype=dt,
        threshold=threshold,
        modules=modules,
        divergence=divergence,
        output=output,
        batches=len(batches),
        seconds=time.perf_counter() - start,
        half_model=label,
        ops=list(d.ops.values()),
        input_rounding=rounding,
    )
