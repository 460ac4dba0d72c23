"""Convert a model to half precision safely.

``convert(model, recipe)`` returns a converted copy; ``convert_`` converts in place. Compared
with ``model.to(torch.float16)`` the converted model:

- keeps numerically fragile modules (norms, and anything the caller names) in fp32 as
  *islands*: they receive fp32 and hand their caller back the dtype it works in;
- keeps any module whose parameters or buffers would overflow the half dtype in fp32
  (BatchNorm ``running_var`` above 65504 never becomes inf);
- casts plain tensor attributes (``self.scale = torch.tensor(...)``), and floating tensors
  in plain dict attributes (derived-tensor caches), which ``.to`` misses;
- guards every half module that owns parameters, so an fp32 tensor made inside ``forward``
  (``torch.zeros(...)`` without dtype) is cast instead of crashing "mat1 and mat2 must have
  the same dtype";
- saturates fill constants beyond the half range (``masked_fill(mask, -1e9)``) to the
  dtype's finite limit in modules whose forward names a fill op (a guard too:
  ``guard_boundaries=False`` turns it off), see :mod:`halfprec.convert.fills`;
- computes single ops named by the recipe's ``op_islands`` in fp32, see
  :mod:`halfprec.convert.op_islands`;
- casts through ``Module._apply`` as ``.to()`` does, so subclass overrides run;
- takes exactly the original inputs: floating tensors anywhere in args/kwargs are cast to
  the compute dtype, integer and bool tensors (token ids, masks) never are; floating outputs
  are cast back to the original dtype unless ``cast_outputs=False``.

The converted model is an ordinary module tree: each of these behaviours is a visible
class swap (:mod:`halfprec.convert.swap`), so it copies, pickles and compiles like the
original, and carries its resolved :class:`~halfprec.convert.recipe.Recipe`
(:func:`recipe_of`). :func:`conversion_report` reads what was done from the tree.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from halfprec.convert.boundaries import (
    Fp32Island,
    Guard,
    GuardSettings,
    IslandSettings,
    RootCast,
    RootSettings,
    mixed_kernel_ok,
)
from halfprec.convert.fills import FillSettings, SaturateFills, has_fill_ops
from halfprec.convert.kinds import (
    is_default_island,
    scripted,
    small_tensors,
)
from halfprec.convert.op_islands import OpIslands, OpPlan, OpRef, OpSettings
from halfprec.convert.op_policy import LEAF_CALLS, LeafSettings, PolicyLeaf
from halfprec.convert.recipe import Recipe, RecipeLike
from halfprec.convert.swap import Behaviour, swap
from halfprec.dtypes import (
    DTypeChoice,
    dtype_name,
    ensure_runnable,
    fits_in,
    range_of,
)
from halfprec.errors import HalfprecError
from halfprec.modules import finite_peak, in_island, model_device, nbytes


@dataclass
class ConversionReport:
    """What :func:`convert` did: dtype, islands with reasons, and sizes. Read from the
    converted model itself by :func:`conversion_report`, so it is the same after a copy,
    a pickle or a load."""

    dtype: torch.dtype
    reason: str
    original_dtype: torch.dtype
    recipe: Recipe
    islands: dict[str, str] = field(default_factory=dict)
    attributes_cast: list[str] = field(default_factory=list)
    guarded_modules: int = 0
    op_islands: list[OpRef] = field(default_factory=list)
    fill_guards: list[str] = field(default_factory=list)
    fp32_ops: list[str] = field(default_factory=list)
    fp32_outputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    params_total: int = 0
    params_fp32: int = 0
    small_fp32: list[str] = field(default_factory=list)
    small_fp32_bytes: int = 0
    bytes_before: int = 0
    bytes_after: int = 0

    @property
    def fp32_share(self) -> float:
        """Share of parameters (by count) kept in fp32: in islands, or small and owned by
        no GEMM-type module (``small_fp32``, ``Recipe.fp32_params_up_to``)."""
        return self.params_fp32 / self.params_total if self.params_total else 0.0

    @property
    def keep_fp32(self) -> list[str]:
        return list(self.islands)

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": dtype_name(self.dtype),
            "reason": self.reason,
            "original_dtype": dtype_name(self.original_dtype),
            "islands": self.islands,
            "attributes_cast": self.attributes_cast,
            "guarded_modules": self.guarded_modules,
            "op_islands": [o.to_json() for o in self.op_islands],
            "fill_guards": self.fill_guards,
            "fp32_ops": self.fp32_ops,
            "fp32_outputs": self.fp32_outputs,
            "notes": self.notes,
            "params_total": self.params_total,
            "params_fp32": self.params_fp32,
            "fp32_share": self.fp32_share,
            "small_fp32": self.small_fp32,
            "small_fp32_bytes": self.small_fp32_bytes,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "recipe": self.recipe.to_json(),
        }


def _root_settings(model: nn.Module) -> RootSettings | None:
    settings = model.__dict__.get(RootCast.attr)
    return settings if isinstance(settings, RootSettings) else None


def recipe_of(model: nn.Module) -> Recipe | None:
    """The resolved recipe ``model`` was converted with (every island by name, a concrete
    dtype: it saves as JSON), or None if halfprec did not convert ``model``."""
    settings = _root_settings(model)
    return settings.recipe if settings is not None else None


def add_note(model: nn.Module, note: str) -> nn.Module:
    """Record ``note`` in the conversion report of the converted ``model``; returns it."""
    settings = _root_settings(model)
    if settings is None:
        raise HalfprecError("add_note needs a model converted by halfprec")
    object.__setattr__(model, RootCast.attr, replace(settings, notes=(*settings.notes, note)))
    return model


def conversion_report(model: nn.Module) -> ConversionReport | None:
    """What the conversion of ``model`` did, read from the model, or None if halfprec did
    not convert it."""
    root = _root_settings(model)
    if root is None:
        return None
    report = ConversionReport(
        dtype=root.dtype,
        reason=root.reason,
        original_dtype=root.original,
        recipe=root.recipe,
        attributes_cast=list(root.attributes_cast),
        fp32_ops=sorted(root.fp32_ops),
        notes=list(root.notes),
    )
    _boundaries(model, root, report)
    _parameters(model, root, report)
    _small_fp32(model, root, report)
    report.bytes_before = _bytes_before(model, root)
    report.bytes_after = nbytes(model)
    return report


def _boundaries(model: nn.Module, root: RootSettings, report: ConversionReport) -> None:
    """The report's islands, hand-offs, guards, fill guards and op islands, read from the
    behaviours swapped into each module."""
    for name, module in model.named_modules():
        island = module.__dict__.get(Fp32Island.attr)
        if isinstance(island, IslandSettings) or (name == "" and not root.cast_inputs):
            report.islands[name] = island.reason if island is not None else "the whole model"
            if island is not None and island.handoff:
                report.fp32_outputs.append(name)
        elif name and scripted(module) and name in root.recipe.keep_fp32:
            # no behaviour can be swapped into TorchScript: only the recipe names the island
            report.islands[name] = "fp32 island in TorchScript code (mixed-dtype kernels)"
        if isinstance(module.__dict__.get(Guard.attr), GuardSettings):
            report.guarded_modules += 1
        if isinstance(module.__dict__.get(SaturateFills.attr), FillSettings):
            report.fill_guards.append(name)
        ops = module.__dict__.get(OpIslands.attr)
        if isinstance(ops, OpSettings):
            report.op_islands.extend(ops.plan.refs)
            if name and not ops.plan.narrow_outputs:
                report.fp32_outputs.append(name)


def _parameters(model: nn.Module, root: RootSettings, report: ConversionReport) -> None:
    """The count of parameters, and of those left fp32 (in an island or not cast); a tied
    parameter counts once."""
    seen: set[int] = set()
    for name, module in model.named_modules():
        kept = in_island(name, report.islands)
        for p in module.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            report.params_total += p.numel()
            if p.is_floating_point() and (kept or p.dtype != root.dtype):
                report.params_fp32 += p.numel()


def _small_fp32(model: nn.Module, root: RootSettings, report: ConversionReport) -> None:
    """The tensors outside islands that stayed in the original dtype, and their bytes."""
    if root.dtype == root.original:
        return
    small: set[int] = set()
    for name, module in model.named_modules():
        if in_island(name, report.islands):
            continue
        for tname, t in (
            *module.named_parameters(recurse=False),
            *module.named_buffers(recurse=False),
        ):
            if t.is_floating_point() and t.dtype == root.original and id(t) not in small:
                small.add(id(t))
                report.small_fp32.append(f"{name}.{tname}" if name else tname)
                report.small_fp32_bytes += t.numel() * t.element_size()


def _bytes_before(model: nn.Module, root: RootSettings) -> int:
    """The model's bytes in its original dtype; a tied tensor's bytes count once, as in
    :func:`~halfprec.modules.nbytes`."""
    sized: set[int] = set()
    before = 0
    for module in model.modules():
        for t in (*module.parameters(recurse=False), *module.buffers(recurse=False)):
            if id(t) in sized:
                continue
            sized.add(id(t))
            size = root.original.itemsize if t.is_floating_point() else t.element_size()
            before += t.numel() * size
    return before


def convert(model: nn.Module, recipe: RecipeLike = None) -> nn.Module:
    """Return a half-precision copy of ``model``; ``model`` itself is left unchanged.

    ``recipe``: a :class:`Recipe`, just a dtype (``"fp16"``, ``"bf16"``, ``"auto"``,
    ``torch.float16``), or the path of a recipe JSON; default ``"auto"``.
    """
    given = Recipe.of(recipe)  # fail on bad options before the copy
    return convert_(copy.deepcopy(model), given)


def convert_(model: nn.Module, recipe: RecipeLike = None) -> nn.Module:
    """Convert ``model`` in place (see :func:`convert`) and return it."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"convert expects an nn.Module, got {type(model).__name__}")
    if _root_settings(model) is not None:
        raise HalfprecError(
            "this model was already converted by halfprec; convert the original fp32 model"
        )
    if isinstance(model, torch.jit.ScriptModule):
        raise HalfprecError(
            "a TorchScript module cannot carry halfprec's boundaries; convert the Python "
            "model, or wrap the scripted one in an nn.Module"
        )
    return _Converter(model, Recipe.of(recipe)).run()


def _tensors(model: nn.Module) -> Iterable[torch.Tensor]:
    yield from model.parameters()
    yield from model.buffers()


def _original_dtype(model: nn.Module) -> torch.dtype:
    for t in _tensors(model):
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def _plain_tensor_attrs(module: nn.Module) -> list[str]:
    return [
        k
        for k, v in vars(module).items()
        if isinstance(v, torch.Tensor)
        and not isinstance(v, nn.Parameter)
        and v.is_floating_point()
        and not k.startswith("__")
    ]


_MODULE_STATE = frozenset(vars(nn.Module()))  # _parameters, _buffers, hooks, ...


def _tensor_dict_attrs(module: nn.Module) -> list[str]:
    """Plain dict attributes holding floating tensors: caches of derived tensors that the
    module keys by device alone (transformers' LeViT attention biases), which ``.to`` and
    ``Module._apply`` leave stale in fp32."""
    return [
        k
        for k, v in vars(module).items()
        if type(v) is dict
        and k not in _MODULE_STATE
        and any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in v.values())
    ]


def _own_memory(t: torch.Tensor) -> torch.Tensor:
    """A copy of an fp32 island's tensor in memory of its own. ``from_pretrained`` loads
    safetensors as views of one memory map of the file; conversion reads every weight, so
    the whole map becomes resident, and a single island still viewing it keeps all of it
    (~90 MB for MiniLM) after the half weights replaced the rest. Islands are small (norms),
    so the copy is cheap, and the map goes with the last fp32 weight."""
    return t.clone()


class _Converter:
    """One conversion: picks islands, casts tensors, swaps in the boundary behaviours."""

    def __init__(self, model: nn.Module, recipe: Recipe) -> None:
        self.model = model
        self.recipe = recipe
        device = model_device(model)
        if device.type == "meta":
            # weights not filled in yet; halfprec's loaders (load, convert_file) fill them
            # on the CPU, so the CPU's kernels decide (the meta device has none)
            device = torch.device("cpu")
        self.choice: DTypeChoice = recipe.resolve(device)
        ensure_runnable(self.choice.dtype, device)
        self.dtype = self.choice.dtype
        self.original = _original_dtype(model)
        self.attributes_cast: list[str] = []

    def run(self) -> nn.Module:
        islands = self._pick_islands()
        plans = self._op_plans(islands)
        handoffs = self._handoffs(islands, plans)  # checked before any tensor is cast
        half_modules = self._cast(islands)
        self._swap(islands, half_modules, plans, handoffs)
        return self.model

    # -- islands ---------------------------------------------------------------------------
    def _selected(self, module: nn.Module, name: str) -> str | None:
        recipe = self.recipe
        if recipe.norm_islands and is_default_island(module, root=name == ""):
            return f"norm island ({type(module).__name__})"
        for sel in recipe.keep_fp32:
            if isinstance(sel, type) and isinstance(module, sel):
                return f"keep_fp32 type {sel.__name__}"
            if isinstance(sel, str) and (name == sel or (name and fnmatch.fnmatchcase(name, sel))):
                return f"keep_fp32 name {sel!r}" if name else "keep_fp32: the whole model"
        if recipe.filter_fn is not None and recipe.filter_fn(module, name):
            return "filter_fn"
        return None

    def _out_of_range(self, module: nn.Module) -> str | None:
        limit = range_of(self.dtype).max
        tensors = list(module.named_parameters(recurse=False)) + list(
            module.named_buffers(recurse=False)
        )
        tensors += [(k, getattr(module, k)) for k in _plain_tensor_attrs(module)]
        for pname, t in tensors:
            if t is None or not t.is_floating_point() or t.numel() == 0 or t.is_meta:
                continue  # meta tensors have no values: the loader decides from the file
            if not fits_in(t, self.dtype):  # the one range rule: inf/NaN fit
                peak = finite_peak(t)
                return f"{pname} reaches {peak:.3g}, beyond {dtype_name(self.dtype)} max {limit:g}"
        return None

    def _pick_islands(self) -> dict[str, str]:
        islands: dict[str, str] = {}
        names = [n for n, _ in self.model.named_modules()]
        for sel in self.recipe.keep_fp32:
            if (
                isinstance(sel, str)
                and sel
                and not any(n == sel or fnmatch.fnmatchcase(n, sel) for n in names if n)
            ):
                raise HalfprecError(self._no_module("keep_fp32", sel, names))
        for name, module in self.model.named_modules():
            if in_island(name, islands):
                continue
            reason = self._selected(module, name) or self._out_of_range(module)
            if reason is not None:
                islands[name] = reason
        self._absorb_shared_parameters(islands)
        return islands

    def _no_module(self, field: str, sel: str, names: list[str]) -> str:
        near = [n for n in names if n and sel.split(".")[-1] in n][:3]
        hint = f" (similar: {', '.join(near)})" if near else ""
        return (
            f"{field} name {sel!r} matches no module of {type(self.model).__name__}{hint}; "
            "list names with model.named_modules()"
        )

    def _handoffs(self, islands: dict[str, str], plans: dict[str, OpPlan]) -> frozenset[str]:
        """``Recipe.fp32_outputs``, checked: each names an island or a module with op
        islands (the modules whose fp32 outputs are otherwise narrowed)."""
        names = [n for n, _ in self.model.named_modules()]
        for name in self.recipe.fp32_outputs:
            if name not in names:
                raise HalfprecError(self._no_module("fp32_outputs", name, names))
            if name not in islands and name not in plans:
                raise HalfprecError(
                    f"fp32_outputs name {name!r} is neither an fp32 island nor a module with "
                    "op islands, so it has no fp32 output to hand on; add it to keep_fp32 too"
                )
        return frozenset(self.recipe.fp32_outputs)

    def _absorb_shared_parameters(self, islands: dict[str, str]) -> None:
        """A parameter tied between an island and a half module keeps both in fp32."""
        island_params = {
            id(p) for n, m in self.model.named_modules() if n in islands for p in m.parameters()
        }
        for name, module in self.model.named_modules():
            if in_island(name, islands):
                continue
            if any(id(p) in island_params for p in module.parameters(recurse=False)):
                islands[name] = "shares a parameter with an fp32 island"

    # -- casting ---------------------------------------------------------------------------
    def _cast(self, islands: dict[str, str]) -> list[nn.Module]:
        """Cast every half module's tensors through ``Module._apply``, as ``.to(dtype)`` does,
        so subclass overrides of ``_apply`` run (caches of derived tensors are dropped)."""
        half_modules: list[nn.Module] = []
        keep: set[int] = set()
        counted: set[int] = set()
        small = small_tensors(self.model, self.recipe.fp32_params_up_to)
        for name, module in self.model.named_modules():
            kept = in_island(name, islands)
            owns = False
            for p in module.parameters(recurse=False):
                stays = kept or id(p) in small
                # a tied parameter is counted once, but every module using it runs half
                owns = owns or (not stays and p.is_floating_point())
                if id(p) in counted:
                    continue
                counted.add(id(p))
                if not p.is_floating_point() or not stays:
                    continue
                if not p.is_meta:  # see _own_memory
                    p.data = _own_memory(p.data)
                grad = p.grad if p.is_leaf else None  # (a non-leaf's .grad warns)
                keep.update((id(p), id(grad)) if grad is not None else (id(p),))
            if kept:
                keep.update(id(b) for b in module.buffers(recurse=False))
                continue
            keep.update(id(b) for b in module.buffers(recurse=False) if id(b) in small)
            for attr in _plain_tensor_attrs(module):
                module.__dict__[attr] = module.__dict__[attr].to(self.dtype)
                self.attributes_cast.append(f"{name}.{attr}" if name else attr)
            for attr in _tensor_dict_attrs(module):
                module.__dict__[attr] = {
                    k: v.to(self.dtype)
                    if isinstance(v, torch.Tensor) and v.is_floating_point()
                    else v
                    for k, v in module.__dict__[attr].items()
                }
                self.attributes_cast.append(f"{name}.{attr}" if name else attr)
            if owns:
                half_modules.append(module)
        dtype = self.dtype

        def cast(t: torch.Tensor) -> torch.Tensor:
            if id(t) in keep or not t.is_floating_point():
                return t
            return t.to(dtype)

        self.model._apply(cast)
        return half_modules

    # -- behaviours ------------------------------------------------------------------------
    def _op_plans(self, islands: dict[str, str]) -> dict[str, OpPlan]:
        """Op islands from the recipe, on half modules only (an island is all fp32)."""
        modules = dict(self.model.named_modules())
        by_module: dict[str, list[OpRef]] = {}
        for ref in self.recipe.op_islands:
            if ref.module not in modules:
                raise HalfprecError(
                    f"op island {ref} names no module of {type(self.model).__name__}; the "
                    "recipe was tuned on another model: re-run `halfprec tune`"
                )
            if not in_island(ref.module, islands) and not scripted(modules[ref.module]):
                by_module.setdefault(ref.module, []).append(ref)
        handoff = set(self.recipe.fp32_outputs)
        return {
            name: OpPlan(self.dtype, tuple(refs), narrow_outputs=name not in handoff | {""})
            for name, refs in by_module.items()
        }

    def _resolved(self, islands: dict[str, str], plans: dict[str, OpPlan]) -> Recipe:
        """The recipe as applied: every island by name, the dtype concrete, no selectors
        that need a model; loading it into a fresh model rebuilds this one exactly."""
        ops = tuple(r for plan in plans.values() for r in plan.refs)
        return self.recipe.replace(
            dtype=self.dtype,
            keep_fp32=tuple(islands),
            norm_islands=False,
            filter_fn=None,
            op_islands=ops,
        )

    def _swap(
        self,
        islands: dict[str, str],
        half_modules: list[nn.Module],
        plans: dict[str, OpPlan],
        handoffs: frozenset[str],
    ) -> None:
        recipe, dtype, original = self.recipe, self.dtype, self.original
        # the root runs its forward under the op policy's mode (see RootCast)
        op_policy = "" not in islands and bool(recipe.fp32_ops or recipe.fp32_inputs)
        guarded = {id(m) for m in half_modules} if recipe.guard_boundaries else set()
        modules = dict(self.model.named_modules())
        for name, module in modules.items():
            if scripted(module):
                continue  # TorchScript code runs its own casts: only the root's apply
            chosen: dict[type[Behaviour], Any] = {}
            if name == "":
                chosen[RootCast] = RootSettings(
                    dtype=dtype,
                    original=original,
                    cast_inputs="" not in islands,
                    cast_outputs=recipe.cast_outputs,
                    recipe=self._resolved(islands, plans),
                    fp32_ops=frozenset(recipe.fp32_ops),
                    # TorchScript code casts nothing: its inputs must arrive half
                    fp32_inputs=recipe.fp32_inputs and not any(map(scripted, modules.values())),
                    reason=self.choice.reason,
                    attributes_cast=tuple(self.attributes_cast),
                    handoffs=bool(handoffs),
                )
            if name in islands and name != "":
                widen = not is_default_island(module)  # no range check on every norm
                handoff = name in handoffs  # a mixed kernel would hand on half
                cast = handoff or not mixed_kernel_ok(module, original, dtype, recipe.mixed_kernels)
                chosen[Fp32Island] = IslandSettings(
                    original, dtype, cast, widen, islands[name], handoff
                )
            elif not in_island(name, islands):
                if name != "" and id(module) in guarded:
                    chosen[Guard] = GuardSettings(dtype)
                if recipe.saturate_fills and has_fill_ops(module):
                    chosen[SaturateFills] = FillSettings(dtype)
                if name in plans:
                    chosen[OpIslands] = OpSettings(plans[name], name)
            calls = LEAF_CALLS.get(type(module))
            if calls is not None and op_policy:  # the op policy's mode can be set aside
                if set(chosen) == {Guard}:
                    chosen[Guard] = GuardSettings(dtype, LeafSettings(calls))
                else:
                    chosen[PolicyLeaf] = LeafSettings(calls)  # innermost: after the casts
            if chosen:
                swap(module, chosen)
