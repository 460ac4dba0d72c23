"""Convert a model to half precision safely.

``convert(model, config)`` returns a converted copy; ``convert_`` converts in place. Compared
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
- computes single ops named by a policy's ``op_islands`` in fp32, see
  :mod:`halfprec.convert.op_islands`;
- casts through ``Module._apply`` as ``.to()`` does, so subclass overrides run;
- takes exactly the original inputs: floating tensors anywhere in args/kwargs are cast to
  the compute dtype, integer and bool tensors (token ids, masks) never are; floating outputs
  are cast back to the original dtype unless ``cast_outputs=False``.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from halfprec.convert.boundaries import (
    cast_inputs_hook,
    cast_outputs_hook,
    guard_hook,
    install_island,
)
from halfprec.convert.fills import SaturatingFills, has_fill_ops
from halfprec.convert.op_islands import OpRef, install_op_islands
from halfprec.convert.policy import Policy
from halfprec.convert.scope import ModeScope
from halfprec.dtypes import (
    DTypeChoice,
    DTypeLike,
    candidate_dtypes,
    dtype_name,
    ensure_runnable,
    is_auto,
    parse_dtype,
    range_of,
    resolve_dtype,
)
from halfprec.errors import HalfprecError
from halfprec.modules import finite_peak, in_island, model_device, nbytes

__all__ = [
    "DEFAULT_ISLAND_TYPES",
    "ConfigLike",
    "ConvertConfig",
    "ConversionReport",
    "FilterFn",
    "convert",
    "convert_",
    "conversion_report",
    "is_default_island",
]

FilterFn = Callable[[nn.Module, str], bool]
Selector = type[nn.Module] | str

DEFAULT_ISLAND_TYPES: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._BatchNorm,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.modules.instancenorm._InstanceNorm,
    nn.LocalResponseNorm,
    nn.RMSNorm,
)

# Hand-written norms in model zoos (LlamaRMSNorm, T5LayerNorm, ...) are fragile the same way.
_NORM_NAME = re.compile(r"(RMS|Layer|Group|Batch|Instance)_?Norm(\dd)?$", re.IGNORECASE)

_REPORT_ATTR = "halfprec_report"


def is_default_island(module: nn.Module) -> bool:
    """True for modules halfprec keeps in fp32 by default: the norm layers."""
    name = getattr(module, "original_name", type(module).__name__)  # TorchScript keeps it
    return isinstance(module, DEFAULT_ISLAND_TYPES) or bool(_NORM_NAME.search(str(name)))


@dataclass(frozen=True)
class ConvertConfig:
    """How to convert a model; every entry point (convert, check, diagnose, tune, audit,
    benchmark, export, load) takes one. Checked on construction.

    ``dtype``: ``"fp16"``, ``"bf16"``, ``"auto"`` or a ``torch.dtype``; ``None`` (default)
    means the policy's dtype, or ``"auto"`` without a policy. An explicit ``dtype`` wins over
    the policy's (see :meth:`requested`).
    ``keep_fp32``: module types or qualified names (``fnmatch`` globs) kept in fp32, on top
    of the norm islands (``norm_islands=False`` drops those) and the policy's names.
    ``filter_fn(module, name) -> bool``: True keeps that module in fp32.
    ``cast_outputs``: cast floating outputs back to the model's original dtype.
    ``guard_boundaries``: cast fp32 tensors made inside ``forward`` at half modules.
    ``mixed_kernels``: let built-in norm islands take half input straight into their fp32
    parameter kernels where the device supports it (no casts); ``False`` always casts, which
    graph formats that need one dtype per op (ONNX) require.
    ``policy``: a :class:`Policy` or the path of one written by ``halfprec tune`` (read once,
    here).
    """

    dtype: DTypeLike | None = None
    keep_fp32: tuple[Selector, ...] = ()
    filter_fn: FilterFn | None = None
    norm_islands: bool = True
    cast_outputs: bool = True
    guard_boundaries: bool = True
    mixed_kernels: bool = True
    policy: Policy | str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        keep: Any = self.keep_fp32
        if isinstance(keep, (str, type)):
            keep = (keep,)
        keep = tuple(keep)
        for sel in keep:
            if not (isinstance(sel, str) or (isinstance(sel, type) and issubclass(sel, nn.Module))):
                raise ValueError(
                    f"keep_fp32 entries must be module types or qualified names, got {sel!r}; "
                    "pass filter_fn=lambda module, name: ... for anything else"
                )
        object.__setattr__(self, "keep_fp32", keep)
        if self.filter_fn is not None and not callable(self.filter_fn):
            raise ValueError("filter_fn must be callable as filter_fn(module, qualified_name)")
        pol: Any = self.policy
        if isinstance(pol, (str, os.PathLike)):
            object.__setattr__(self, "policy", Policy.load(pol))
        elif pol is not None and not isinstance(pol, Policy):
            raise ValueError(
                f"policy must be a Policy or the path of a policy JSON, got {type(pol).__name__}"
            )
        if self.dtype is not None:
            dtype = "auto" if is_auto(self.dtype) else parse_dtype(self.dtype)
            object.__setattr__(self, "dtype", dtype)

    @classmethod
    def of(cls, config: ConfigLike) -> ConvertConfig:
        """The config that ``config`` stands for: ``None`` is ``ConvertConfig()``, a dtype
        (``"bf16"``, ``torch.float16``, ``"auto"``) is ``ConvertConfig(dtype=...)``, and a
        :class:`Policy` is ``ConvertConfig(policy=...)``."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        if isinstance(config, (str, torch.dtype)):
            return cls(dtype=config)
        if isinstance(config, Policy):
            return cls(policy=config)
        raise TypeError(
            f'expected a ConvertConfig, a dtype ("fp16", "bf16", "auto", torch.float16) '
            f"or None, got {type(config).__name__}; pass options as "
            "ConvertConfig(dtype=..., keep_fp32=...)"
        )

    @property
    def requested(self) -> DTypeLike:
        """The dtype asked for: an explicit ``dtype`` (including ``"auto"``) wins over the
        policy's dtype; without either, ``"auto"``. The one place this is decided."""
        if self.dtype is not None:
            return self.dtype
        return self.loaded_policy.dtype if self.loaded_policy is not None else "auto"

    def resolve(self, device: str | torch.device = "cpu") -> DTypeChoice:
        """The compute dtype on ``device`` and why (``"auto"`` resolved by
        :func:`~halfprec.dtypes.resolve_dtype`)."""
        if self.dtype is None and self.loaded_policy is not None:
            dtype = self.loaded_policy.dtype
            return DTypeChoice(dtype, f"policy {dtype_name(dtype)}")
        return resolve_dtype(self.requested, device)

    def candidates(self, device: str | torch.device = "cpu") -> tuple[torch.dtype, ...]:
        """The dtypes a search tries (tune, bench): the requested one, or for ``"auto"``
        every half dtype ``device`` runs (see :func:`~halfprec.dtypes.candidate_dtypes`)."""
        return candidate_dtypes(self.requested, device)

    @property
    def selectors(self) -> tuple[Selector, ...]:
        """``keep_fp32`` plus the policy's module names."""
        pol = self.loaded_policy
        return self.keep_fp32 + (pol.keep_fp32 if pol is not None else ())

    @property
    def loaded_policy(self) -> Policy | None:
        """The policy (a path given as ``policy`` is read in ``__post_init__``)."""
        return self.policy if isinstance(self.policy, Policy) else None

    def replace(self, **changes: Any) -> ConvertConfig:
        """A copy with ``changes`` (``dataclasses.replace``), checked again."""
        return dataclasses.replace(self, **changes)


ConfigLike = ConvertConfig | DTypeLike | Policy | None


@dataclass
class ConversionReport:
    """What :func:`convert` did: dtype, islands with reasons, and sizes."""

    dtype: torch.dtype
    reason: str
    original_dtype: torch.dtype
    islands: dict[str, str] = field(default_factory=dict)
    attributes_cast: list[str] = field(default_factory=list)
    guarded_modules: int = 0
    op_islands: list[OpRef] = field(default_factory=list)
    fill_guards: list[str] = field(default_factory=list)
    saturated_fills: dict[str, str] = field(default_factory=dict)
    params_total: int = 0
    params_fp32: int = 0
    bytes_before: int = 0
    bytes_after: int = 0

    @property
    def fp32_share(self) -> float:
        """Share of parameters (by count) kept in fp32."""
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
            "saturated_fills": self.saturated_fills,
            "params_total": self.params_total,
            "params_fp32": self.params_fp32,
            "fp32_share": self.fp32_share,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
        }


def conversion_report(model: nn.Module) -> ConversionReport | None:
    """The report of the conversion ``model`` went through, or None if it was not converted."""
    report = model.__dict__.get(_REPORT_ATTR)
    return report if isinstance(report, ConversionReport) else None


def convert(model: nn.Module, config: ConfigLike = None) -> nn.Module:
    """Return a half-precision copy of ``model``; ``model`` itself is left unchanged.

    ``config``: a :class:`ConvertConfig`, or just a dtype (``"fp16"``, ``"bf16"``,
    ``"auto"``, ``torch.float16``); default ``"auto"``.
    """
    cfg = ConvertConfig.of(config)  # fail on bad options before the copy
    return convert_(copy.deepcopy(model), cfg)


def convert_(model: nn.Module, config: ConfigLike = None) -> nn.Module:
    """Convert ``model`` in place (see :func:`convert`) and return it."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"convert expects an nn.Module, got {type(model).__name__}")
    if conversion_report(model) is not None:
        raise HalfprecError(
            "this model was already converted by halfprec; convert the original fp32 model"
        )
    return _Converter(model, ConvertConfig.of(config)).run()


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
    """One conversion: picks islands, casts tensors, installs boundary hooks."""

    def __init__(self, model: nn.Module, config: ConvertConfig) -> None:
        self.model = model
        self.config = config
        device = model_device(model)
        self.choice: DTypeChoice = config.resolve(device)
        ensure_runnable(self.choice.dtype, device)
        self.dtype = self.choice.dtype
        self.original = _original_dtype(model)
        self.report = ConversionReport(
            dtype=self.dtype,
            reason=self.choice.reason,
            original_dtype=self.original,
            bytes_before=nbytes(model),
        )

    def run(self) -> nn.Module:
        islands = self._pick_islands()
        self.report.islands = islands
        half_modules = self._cast(islands)
        self._install_hooks(islands, half_modules)
        self.report.bytes_after = nbytes(self.model)
        self.model.__dict__[_REPORT_ATTR] = self.report
        return self.model

    # -- islands ---------------------------------------------------------------------------
    def _selected(self, module: nn.Module, name: str) -> str | None:
        cfg = self.config
        if cfg.norm_islands and is_default_island(module):
            return f"norm island ({type(module).__name__})"
        for sel in cfg.selectors:
            if isinstance(sel, type) and isinstance(module, sel):
                return f"keep_fp32 type {sel.__name__}"
            if isinstance(sel, str) and name and (name == sel or fnmatch.fnmatchcase(name, sel)):
                return f"keep_fp32 name {sel!r}"
        if cfg.filter_fn is not None and cfg.filter_fn(module, name):
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
            peak = finite_peak(t)
            if peak > limit:
                return f"{pname} reaches {peak:.3g}, beyond {dtype_name(self.dtype)} max {limit:g}"
        return None

    def _pick_islands(self) -> dict[str, str]:
        islands: dict[str, str] = {}
        names = [n for n, _ in self.model.named_modules()]
        for sel in self.config.selectors:
            if isinstance(sel, str) and not any(
                n == sel or fnmatch.fnmatchcase(n, sel) for n in names if n
            ):
                near = [n for n in names if n and sel.split(".")[-1] in n][:3]
                hint = f" (similar: {', '.join(near)})" if near else ""
                raise HalfprecError(
                    f"keep_fp32 name {sel!r} matches no module of {type(self.model).__name__}"
                    f"{hint}; list names with model.named_modules()"
                )
        for name, module in self.model.named_modules():
            if in_island(name, islands):
                continue
            reason = self._selected(module, name) or self._out_of_range(module)
            if reason is not None:
                islands[name] = reason
        self._absorb_shared_parameters(islands)
        return islands

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
        total = fp32 = 0
        counted: set[int] = set()
        for name, module in self.model.named_modules():
            kept = in_island(name, islands)
            owns = False
            for p in module.parameters(recurse=False):
                # a tied parameter is counted once, but every module using it runs half
                owns = owns or (not kept and p.is_floating_point())
                if id(p) in counted:
                    continue
                counted.add(id(p))
                total += p.numel()
                if not p.is_floating_point():
                    continue
                if kept:
                    fp32 += p.numel()
                    if not p.is_meta:  # see _own_memory
                        p.data = _own_memory(p.data)
                    grad = p.grad if p.is_leaf else None  # (a non-leaf's .grad warns)
                    keep.update((id(p), id(grad)) if grad is not None else (id(p),))
            if kept:
                keep.update(id(b) for b in module.buffers(recurse=False))
                continue
            for attr in _plain_tensor_attrs(module):
                module.__dict__[attr] = module.__dict__[attr].to(self.dtype)
                self.report.attributes_cast.append(f"{name}.{attr}" if name else attr)
            for attr in _tensor_dict_attrs(module):
                module.__dict__[attr] = {
                    k: v.to(self.dtype)
                    if isinstance(v, torch.Tensor) and v.is_floating_point()
                    else v
                    for k, v in module.__dict__[attr].items()
                }
                self.report.attributes_cast.append(f"{name}.{attr}" if name else attr)
            if owns:
                half_modules.append(module)
        dtype = self.dtype

        def cast(t: torch.Tensor) -> torch.Tensor:
            if id(t) in keep or not t.is_floating_point():
                return t
            return t.to(dtype)

        self.model._apply(cast)
        self.report.params_total = total
        self.report.params_fp32 = fp32
        return half_modules

    # -- hooks -----------------------------------------------------------------------------
    def _install_hooks(self, islands: dict[str, str], half_modules: list[nn.Module]) -> None:
        dtype, original = self.dtype, self.original
        root_is_island = "" in islands
        if not root_is_island:
            self.model.register_forward_pre_hook(cast_inputs_hook(dtype), with_kwargs=True)
            if self.config.cast_outputs:
                self.model.register_forward_hook(cast_outputs_hook(dtype, original))
        modules = dict(self.model.named_modules())
        # TorchScript code ignores Python hooks (and refuses them): inside a scripted module
        # only the parameter casts and the root's IO casting apply.
        for name in islands:
            if name != "" and not isinstance(modules[name], torch.jit.ScriptModule):
                module = modules[name]
                widen = not is_default_island(module)  # no range check on every norm
                install_island(module, original, dtype, self.config.mixed_kernels, widen=widen)
        if self.config.guard_boundaries:
            for module in half_modules:
                if module is not self.model and not isinstance(module, torch.jit.ScriptModule):
                    module.register_forward_pre_hook(guard_hook(dtype))
            self.report.guarded_modules = len(half_modules)
            self._guard_fills(islands)  # a guard too: audit turns guards off to see leaks
        self._install_op_islands(islands)

    def _install_op_islands(self, islands: dict[str, str]) -> None:
        """Op islands from the policy, on half modules only (an island is all fp32)."""
        policy = self.config.loaded_policy
        ops = policy.op_islands if policy is not None else ()
        modules = dict(self.model.named_modules())
        by_module: dict[str, list[OpRef]] = {}
        for ref in ops:
            if ref.module not in modules:
                raise HalfprecError(
                    f"op island {ref} names no module of {type(self.model).__name__}; the "
                    "policy was tuned on another model: re-run `halfprec tune`"
                )
            if not in_island(ref.module, islands):
                by_module.setdefault(ref.module, []).append(ref)
        for name, refs in by_module.items():
            install_op_islands(modules[name], refs, self.dtype, narrow_outputs=name != "")
            self.report.op_islands.extend(refs)

    def _guard_fills(self, islands: dict[str, str]) -> None:
        """Saturating fills in the half modules whose own forward names a fill op."""
        scope = ModeScope(SaturatingFills(self.dtype, self.report.saturated_fills))
        for name, module in self.model.named_modules():
            if in_island(name, islands):
                continue
            if isinstance(module, torch.jit.ScriptModule) or not has_fill_ops(module):
                continue
            scope.attach(module)
            self.report.fill_guards.append(name)
