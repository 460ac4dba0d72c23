"""The variants ``halfprec bench`` puts side by side: a way of running the model in a dtype,
compiled or not.

A :class:`Variant` names a way of :mod:`halfprec.bench.ways` (its registry holds each one's
build, dtypes and rules) and a dtype: ``fp32`` (the model as it is, timed under the
caller's fp32 settings; its reference outputs in IEEE fp32:
:func:`halfprec.fp32.exact_fp32`), ``naive-bf16`` (``model.to(dtype)``), ``autocast-fp16``
(``torch.autocast``), ``halfprec-bf16`` (:func:`halfprec.convert`), ``openvino-bf16`` and
``onnxruntime-fp32`` (another runtime, built from an example batch, never ``+compile``),
and any way registered since.

A way that runs in torch may be under ``torch.compile`` (``+compile``), compiled the way
that deploys fastest on the device (:data:`COMPILE_RECIPES`): on CPU torch.compile's
default, which inductor caches on disk (a new process loads the compiled graph); on CUDA
with ``mode="max-autotune"``, which autotunes the GEMMs and captures CUDA graphs where the
shapes are static. On CPU a half variant can also be ``+autotune``: ``max-autotune`` with
inductor freezing (:data:`AUTOTUNE_RECIPES`), whose GEMM templates (AMX or AVX512
micro-kernels) can beat oneDNN's where half GEMMs are native; bench and deploy try it only
where the machine's features and the measured half GEMM speed say it can pay
(:func:`autotune_pays`). A compiled variant runs every call under ``torch.no_grad()``,
outside inference mode, so that no call compiles it again for another grad mode.
:func:`build_variant` returns a ready-to-call module built from a copy (an fp32 variant
with ``share=True``: the model itself, compiled or not); the original model is not changed.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from halfprec.bench.ways import WAYS, Way
from halfprec.convert.recipe import Recipe
from halfprec.dtypes import HALF_DTYPES, dtype_name, parse_dtype
from halfprec.errors import HalfprecError
from halfprec.modules import model_device

__all__ = [
    "DEFAULT_VARIANTS",
    "Variant",
    "VariantError",
    "parse_variants",
    "build_variant",
    "CompileRecipe",
    "COMPILE_RECIPES",
    "AUTOTUNE_RECIPES",
    "AUTOTUNE_FEATURES",
    "autotune_pays",
    "compile_for_device",
]

_COMPILE = "+compile"
_AUTOTUNE = "+autotune"


class VariantError(HalfprecError, ValueError):
    """A variant name that halfprec bench does not know."""


@dataclass(frozen=True)
class Variant:
    """One way to run the model: ``kind``, the name of a way in
    :data:`~halfprec.bench.ways.WAYS`, a dtype it runs in, compiled or not."""

    kind: str
    dtype: torch.dtype = torch.float32
    compiled: bool = False
    autotune: bool = False

    def __post_init__(self) -> None:
        if self.kind not in WAYS:
            raise ValueError(f"variant kind must be one of {', '.join(WAYS)}, got {self.kind!r}")
        if self.autotune and not self.compiled:
            raise ValueError("an autotune variant is compiled: pass compiled=True")
        way = self.way
        if self.compiled and not way.compilable:
            name = f"{self.kind}-{dtype_name(self.dtype)}"
            how = f"is compiled by {way.runs_in} itself" if way.runtime else "is not compiled"
            raise VariantError(f"{name} {how}; drop +compile")
        if self.dtype not in way.dtypes:
            raise VariantError(way.refuse_dtype(self.dtype))

    @property
    def name(self) -> str:
        base = "fp32" if self.kind == "fp32" else f"{self.kind}-{dtype_name(self.dtype)}"
        if self.autotune:
            return base + _AUTOTUNE
        return base + (_COMPILE if self.compiled else "")

    @property
    def way(self) -> Way:
        """The way this variant runs the model (:data:`~halfprec.bench.ways.WAYS`)."""
        return WAYS[self.kind]

    @property
    def runtime(self) -> bool:
        """Run by another runtime (OpenVINO, onnxruntime), not by torch."""
        return self.way.runtime

    def with_compile(self, autotune: bool = False) -> Variant:
        return Variant(self.kind, self.dtype, compiled=True, autotune=autotune)

    @classmethod
    def parse(cls, text: str) -> Variant:
        """``fp32``, ``naive-bf16``, ``autocast-fp16``, ``halfprec-bf16``, ... ``+compile``."""
        raw = text.strip().lower()
        autotune = raw.endswith(_AUTOTUNE)
        compiled = autotune or raw.endswith(_COMPILE)
        base = raw.removesuffix(_COMPILE).removesuffix(_AUTOTUNE)
        if base == "fp32":
            return cls("fp32", torch.float32, compiled, autotune)
        kind, _, dt = base.partition("-")
        if kind in WAYS and kind != "fp32" and dt:
            allow_fp32 = torch.float32 in WAYS[kind].dtypes
            try:
                return cls(kind, parse_dtype(dt, allow_fp32=allow_fp32), compiled, autotune)
            except VariantError:
                raise
            except HalfprecError:
                pass
        torch_ways = [w for w in WAYS.values() if not w.runtime]
        known = ", ".join(["fp32", *(_names(w) for w in torch_ways if w.name != "fp32")])
        runtimes = ", ".join(_names(w) for w in WAYS.values() if w.runtime)
        raise VariantError(
            f"unknown variant {text!r}; use one of: {known} (append +compile for "
            f"torch.compile, +autotune for max-autotune on CPU), or a runtime: {runtimes}"
        )


def _names(way: Way) -> str:
    """``way``'s variant names, one per dtype it runs in."""
    return ", ".join(f"{way.name}-{dtype_name(d)}" for d in way.dtypes)


def default_variants() -> tuple[Variant, ...]:
    """What ``halfprec bench`` runs without ``--variants``: each ``bench_default`` way in
    each of its dtypes, in the registry's order."""
    return tuple(Variant(w.name, d) for w in WAYS.values() if w.bench_default for d in w.dtypes)


DEFAULT_VARIANTS: tuple[Variant, ...] = default_variants()
"""The built-in ways' default variants (a way registered later joins
:func:`default_variants`)."""


def parse_variants(
    texts: Sequence[str] | None,
    *,
    compile: bool = False,
    dtypes: Sequence[torch.dtype] | None = None,
) -> list[Variant]:
    """Parse variant names (default: those of :data:`DEFAULT_VARIANTS` in ``dtypes``, all
    when ``dtypes`` is None); fp32 always comes first because speedups are measured against
    it. ``compile`` adds a ``+compile`` twin of each named torch variant; of the default
    list, only of the ways deploy may choose (:func:`uncompiled_twins` names the rest)."""
    if texts:
        parsed = [Variant.parse(t) for t in texts]
    else:
        parsed = [
            v for v in default_variants() if dtypes is None or v.kind == "fp32" or v.dtype in dtypes
        ]
    if compile:
        twin = [v for v in parsed if not (v.compiled or v.runtime)]
        parsed += [v.with_compile() for v in twin if texts or v.way.choosable]
    if Variant("fp32") not in parsed:
        parsed.insert(0, Variant("fp32"))
    unique = list(dict.fromkeys(parsed))
    unique.sort(key=lambda v: (v.compiled, v != Variant("fp32")))
    return unique


def uncompiled_twins(variants: Sequence[Variant]) -> list[Variant]:
    """The ``+compile`` twins missing from ``variants`` of ways deploy never chooses
    (``naive``, ``autocast``): a default ``--compile`` run compiles only what the choice
    can pick, and these are timed only when named in ``--variants``."""
    have = set(variants)
    return [
        v.with_compile()
        for v in variants
        if not (v.compiled or v.runtime or v.way.choosable)
        and v.way.compilable
        and v.with_compile() not in have
    ]


def compile_note(variants: Sequence[Variant]) -> str | None:
    """The line that says which twins a ``--compile`` run left out (None: none)."""
    missing = [v.name for v in uncompiled_twins(variants)]
    if not missing:
        return None
    return (
        "compiled only the ways deploy may choose; name "
        + " or ".join(missing)
        + f" in --variants to time {'it' if len(missing) == 1 else 'them'}"
    )


@dataclass(frozen=True)
class CompileRecipe:
    """How ``+compile`` variants compile on one device type: ``torch.compile(mode=mode)``,
    with inductor ``freezing`` (weights as constants) for every variant when set, or for
    the fp16/bf16 variants only with ``freeze_half``."""

    mode: str | None = None
    freezing: bool = False
    freeze_half: bool = False

    def __post_init__(self) -> None:
        modes = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
        if self.mode not in modes:
            raise ValueError(f"compile mode must be one of {modes}, got {self.mode!r}")

    def freezes(self, dtype: torch.dtype) -> bool:
        """Whether a variant computing in ``dtype`` compiles frozen."""
        return self.freezing or (self.freeze_half and dtype in HALF_DTYPES)


# One table: the fastest deploy compile per device type (others get the default compile).
# CPU fp32 compiles unfrozen: freezing is no faster there, and a frozen graph holds
# prepacked mkldnn weights that inductor's caches cannot store, so every new process would
# compile it again, where an unfrozen one is loaded from the FX graph and AOTAutograd
# caches. CPU fp16/bf16 compile frozen: oneDNN's prepacked half GEMMs are what
# torch.compile's half speed on CPU rests on. The measurements behind both are in
# docs/benchmarks.md ("Where the compile recipes come from").
COMPILE_RECIPES: dict[str, CompileRecipe] = {
    "cpu": CompileRecipe(mode=None, freeze_half=True),
    "cuda": CompileRecipe(mode="max-autotune"),
}

# ``+autotune``: max-autotune with freezing, where it differs from the default recipe. Where
# half GEMMs are native (AMX), inductor's micro-GEMM template can beat oneDNN's linear; it
# is tried only there (:func:`autotune_pays`).
AUTOTUNE_RECIPES: dict[str, CompileRecipe] = {
    "cpu": CompileRecipe(mode="max-autotune", freezing=True),
}

AUTOTUNE_MIN_GEMM_RATIO = 1.2
"""The eager half/fp32 GEMM ratio from which ``+autotune`` is tried: half GEMMs clearly
faster than fp32's (AMX: ~4x; emulated bf16: 0.01-0.1x)."""

# The CPU feature that gives inductor's max-autotune a half micro-GEMM template of its own,
# per dtype. Without it the only template is fp32-vectorised (``CppMicroGemmFP32Vec``),
# oneDNN's linear wins every GEMM, and max-autotune's autotuning ends in +compile's kernels.
AUTOTUNE_FEATURES: dict[torch.dtype, str] = {torch.bfloat16: "amx_bf16", torch.float16: "amx_fp16"}


def autotune_pays(
    dtype: torch.dtype,
    device: torch.device | str,
    gemm_ratio: float | None,
    features: Collection[str] = (),
) -> str | None:
    """None when ``+autotune`` is worth its compile for ``dtype`` on ``device``; else why
    not, in one line. Decided by machine facts, not by the CPU's name: the device's features
    (``features``, from the one device table: the AMX tiles that give max-autotune a half
    micro-GEMM template) and the measured eager half/fp32 GEMM ratio (the probe's or the
    limit's: native half GEMMs, not emulated or barely faster ones)."""
    dev = torch.device(device)
    if dev.type not in AUTOTUNE_RECIPES:
        return f"+autotune is a CPU recipe; on {dev.type} +compile already autotunes"
    if dtype not in AUTOTUNE_FEATURES:
        return "+autotune is tried for half dtypes, whose GEMM templates it can pick"
    name, needed = dtype_name(dtype), AUTOTUNE_FEATURES[dtype]
    if needed not in features:
        return (
            f"max-autotune has no {name} GEMM template without {needed} (its template here "
            "is fp32-vectorised and oneDNN's kernels win): it would compile +compile's kernels"
        )
    if gemm_ratio is None:
        return f"{name} GEMMs were not measured here (the probe and limit were off)"
    if gemm_ratio < AUTOTUNE_MIN_GEMM_RATIO:
        return (
            f"{name} GEMMs ran {gemm_ratio:.2f}x fp32's here (eager); max-autotune is "
            f"tried from {AUTOTUNE_MIN_GEMM_RATIO:g}x, where half GEMMs are native"
        )
    return None


class _Inference(nn.Module):
    """Calls a compiled module the same way every time, without autograd: outside
    inference mode (``torch.inference_mode(False)``, so outputs are ordinary tensors even
    where bench and deploy warm it, inside ``inference_mode``) and under
    ``torch.no_grad()``. dynamo guards on these modes, so a call in another mode would
    compile the model again. With ``freezing``, inductor freezing is switched on for that
    call only (``torch._inductor.config.patch`` restores the caller's setting).
    Compilation happens on the first call."""

    def __init__(self, compiled: nn.Module, freezing: bool) -> None:
        super().__init__()
        self.compiled = compiled  # holds the original as ``_orig_mod``: same parameters
        self.freezing = freezing

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        patch: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if self.freezing:  # the import only here: it costs each call about 1 us
            import torch._inductor.config as inductor_config

            patch = inductor_config.patch(freezing=True)
        with patch, torch.inference_mode(False), torch.no_grad():
            return self.compiled(*args, **kwargs)


def compile_for_device(
    module: nn.Module,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    *,
    autotune: bool = False,
) -> nn.Module:
    """``module`` (computing in ``dtype``) under ``torch.compile`` with
    :data:`COMPILE_RECIPES`'s recipe for ``device`` (``autotune``: :data:`AUTOTUNE_RECIPES`'s
    where there is one), each call without autograd and outside inference mode
    (:class:`_Inference`; compiles lazily, on the first call)."""
    kind = torch.device(device).type
    recipe = COMPILE_RECIPES.get(kind, CompileRecipe())
    if autotune:
        recipe = AUTOTUNE_RECIPES.get(kind, recipe)
    compiled: nn.Module = torch.compile(module, mode=recipe.mode)  # type: ignore[assignment]
    return _Inference(compiled, recipe.freezes(dtype))


def build_variant(
    model: nn.Module,
    variant: Variant,
    config: Recipe | None = None,
    *,
    in_place: bool = False,
    batch: Any = None,
    share: bool = False,
) -> nn.Module:
    """A module that runs ``model`` the way ``variant`` says.

    ``model`` is copied unless ``in_place`` (the memory worker converts in place so that
    no fp32 copy stays resident). ``share``: an fp32 variant runs ``model`` itself, a
    ``+compile`` one wrapped by ``torch.compile``: no copy, and ``model`` is neither
    changed nor put in eval mode (the caller does that: bench's reference is the caller's
    model, under :func:`~halfprec.modules.evaluating`); other kinds are built as without
    it. ``config`` shapes the halfprec variants (its islands; the dtype is the variant's).
    ``batch``: the example batch a runtime variant is traced on (needed for those only).
    The way itself builds the module (:meth:`~halfprec.bench.ways.base.Way.build`).
    """
    if share and variant.kind == "fp32":
        if not variant.compiled:
            return model
        return compile_for_device(model, model_device(model), autotune=variant.autotune)
    way = variant.way
    if way.needs_batch and batch is None:
        raise ValueError(f"{variant.name} is traced on an example batch; pass batch=")
    base = model if in_place else copy.deepcopy(model)
    base.eval()
    built = way.build(base, variant.dtype, config or Recipe(), batch if way.needs_batch else None)
    if variant.compiled:
        built = compile_for_device(
            built, model_device(base), variant.dtype, autotune=variant.autotune
        )
    return built
