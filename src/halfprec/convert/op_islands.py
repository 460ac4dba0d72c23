"""Op-level fp32 islands: single operations inside a module's own code computed in fp32.

An op is named by the module that runs it, the op's name, its source location
(``file.py:line``, the innermost frame outside halfprec), its occurrence (how many times
that op at that line already ran in the current call of the module) and its ordinal (how
many calls of that op name reached the module's mode before it in one call of the
module, its children's calls included)::

    OpRef(module="", op="exp", location="model.py:41", occurrence=0, ordinal=3)

Its ``kind`` says how the op is computed: ``"fp32"`` (the default) on fp32 copies of its
inputs, or ``"scaled"`` (GEMM-type ops only, :data:`~halfprec.convert.scaled.SCALED_OPS`)
in half on operands scaled by powers of two, the result fp32 with the scales undone
(:mod:`halfprec.convert.scaled`): the range of fp32 at the cost of a half GEMM.

:class:`OpIslands` runs a module's ``forward`` under an :class:`OpIslandMode` that counts
the calls of the island op names and computes the named ones on fp32 copies of their
inputs. A ref with an ordinal is found by counting alone, with no frame inspection, so
the mode compiles into the module's graph. A ref without one (written by hand, or by an
older halfprec) is found by its location, which walks the stack on each call of that op
name, in eager mode only; :func:`resolve_ordinals` turns location refs into ordinal refs
with one calibration call (``halfprec.tune`` does this for every recipe it returns).

The result stays fp32 (of either kind): ops on it alone stay fp32 by promotion, and an op
that mixes it with half tensors casts it back to half when it fits the half range and
otherwise runs in fp32 too, so an island extends downstream for as long as the value is
out of range (the one range rule, :func:`halfprec.dtypes.fits_in`). Where values cannot
be read without stalling or breaking a graph (a compiled or exported graph, a CUDA graph
capture, any device but the CPU: :func:`~halfprec.convert.swap.values_readable`) it
stays fp32 until a half module's boundary casts it. The module's outputs are cast back to half
where they fit. Internal casts and range checks run with torch functions disabled, so
they never count.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

import torch
from torch import nn

from halfprec.convert.scaled import SCALED_OPS, scale_operands
from halfprec.convert.scope import NamedOpMode
from halfprec.convert.swap import Behaviour, values_readable
from halfprec.dtypes import cast_floating, fits_in
from halfprec.frames import is_library_file, is_torch_file
from halfprec.tree import iter_tensors, map_tensors

__all__ = [
    "KINDS",
    "OpIslandMode",
    "OpIslands",
    "OpPlan",
    "OpRef",
    "OwnOpMode",
    "fits",
    "own_op",
    "recording_ordinals",
    "with_ordinals",
]

_CALL_IMPL = nn.Module._call_impl.__code__
KINDS = ("fp32", "scaled")  # how an op island computes its op
_TORCH_WRAPPERS = ("_tensor.py", "overrides.py", "_device.py", "_jit_internal.py")


@dataclass(frozen=True, order=True)
class OpRef:
    """One op in one module's own code: module name, op name, ``file:line``, occurrence;
    ``kind``: computed in ``"fp32"`` or as a ``"scaled"`` half GEMM."""

    module: str
    op: str
    location: str
    occurrence: int = 0
    ordinal: int | None = None
    kind: str = "fp32"

    def __post_init__(self) -> None:
        if not isinstance(self.module, str) or not isinstance(self.op, str) or not self.op:
            raise ValueError(f"OpRef needs a module name and an op name, got {self!r}")
        if self.op.startswith("_"):
            raise ValueError(f"OpRef.op {self.op!r}: private ops are never op islands")
        where, _, line = str(self.location).rpartition(":")
        if not isinstance(self.location, str) or not where or not line.isdigit():
            raise ValueError(f"OpRef needs a 'file.py:line' location, got {self.location!r}")
        for name in ("occurrence", "ordinal"):
            value = getattr(self, name)
            if value is None and name == "ordinal":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"OpRef.{name} must be an int >= 0, got {value!r}")
        if self.kind not in KINDS:
            raise ValueError(f"OpRef.kind must be 'fp32' or 'scaled', got {self.kind!r}")
        if self.kind == "scaled" and self.op not in SCALED_OPS:
            raise ValueError(
                f"OpRef(op={self.op!r}, kind='scaled'): only a GEMM of two operands can be "
                f"scaled ({', '.join(sorted(SCALED_OPS))}); use kind='fp32' for {self.op!r}"
            )

    def __str__(self) -> str:
        where = f"{self.module or '(model)'}: {self.op} at {self.location} #{self.occurrence}"
        return where + (" (scaled half)" if self.kind == "scaled" else "")

    @property
    def site(self) -> tuple[str, str, str, int]:
        """What names the op in its module's code, without the ordinal."""
        return (self.module, self.op, self.location, self.occurrence)

    @property
    def scaled(self) -> bool:
        return self.kind == "scaled"

    def with_kind(self, kind: str) -> OpRef:
        return replace(self, kind=kind)

    def to_json(self) -> dict[str, Any]:
        """The ref as JSON values; ``kind`` only when it is not ``"fp32"``, so recipes of
        fp32 op islands read as they did before kinds existed."""
        out = dict(self.__dict__)
        if out["kind"] == "fp32":
            del out["kind"]
        return out

    @classmethod
    def from_json(cls, data: Any) -> OpRef:
        if not isinstance(data, dict) or not {"module", "op", "location"} <= set(data):
            raise ValueError(f"an op island is an object with module, op and location: {data!r}")
        unknown = set(data) - {"module", "op", "location", "occurrence", "ordinal", "kind"}
        if unknown:
            raise ValueError(f"op island {data!r} has unknown keys {sorted(unknown)}")
        return cls(
            module=data["module"],
            op=data["op"],
            location=data["location"],
            occurrence=data.get("occurrence", 0),
            ordinal=data.get("ordinal"),
            kind=data.get("kind", "fp32"),
        )


@functools.lru_cache(maxsize=4096)
def _ours(filename: str) -> bool:
    """halfprec's own frames (not its testing hazards), and torch's thin Python wrappers."""
    if is_torch_file(filename):
        return filename.endswith(_TORCH_WRAPPERS)
    return is_library_file(filename)


def own_op(frame: FrameType | None, module: nn.Module) -> str | None:
    """``file.py:line`` when the op called from ``frame`` belongs to ``module``'s own code
    (no module call lies between them), else None."""
    location = None
    while frame is not None:
        code = frame.f_code
        if code is _CALL_IMPL:
            return location if frame.f_locals.get("self") is module else None
        if location is None and not _ours(code.co_filename):
            location = f"{os.path.basename(code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def fits(t: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the carried fp32 ``t`` may be cast to ``dtype``: the one range rule,
    :func:`~halfprec.dtypes.fits_in` (inf/NaN fit, a finite value that would become inf
    does not).

    Where ``t``'s values cannot be read (:func:`~halfprec.convert.swap.values_readable`:
    while ``torch.compile``, ``torch.export`` or ``torch.jit.trace`` traces, while a CUDA
    graph is captured, and on an asynchronous device, where each read would stall the
    queue on every forward) nothing counts as fitting: carried fp32 values stay fp32 until
    a half module's boundary casts them, never narrower than in eager mode on the CPU."""
    return values_readable(t) and fits_in(t, dtype)


def _float_dtypes(args: Any) -> set[torch.dtype]:
    return {t.dtype for _, t in iter_tensors(args) if t.is_floating_point()}


class OwnOpMode(NamedOpMode):
    """Base of the modes that act on one module's own ops: subclasses implement
    :meth:`on_own_op`, called with each own op's name, location and occurrence."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.local = threading.local()
        self.reset()

    def reset(self) -> None:
        """Start counting occurrences afresh (at each call of the module)."""
        self.local.counts = defaultdict(int)

    def on_op(
        self, func: Callable[..., Any], op: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if op.startswith("_"):  # attribute access, indexing, dunders: never islands
            return func(*args, **kwargs)
        location = own_op(sys._getframe(1), self.module)
        if location is None:
            return func(*args, **kwargs)
        counts = getattr(self.local, "counts", None)
        if counts is None:
            counts = self.local.counts = defaultdict(int)
        nth = counts[(op, location)]
        counts[(op, location)] = nth + 1
        return self.on_own_op(func, OpRef("", op, location, nth), args, kwargs)

    def on_own_op(
        self, func: Callable[..., Any], ref: OpRef, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``ref.module`` is left empty here; the subclass knows the module's name."""
        raise NotImplementedError


@dataclass(frozen=True)
class OpPlan:
    """The op islands of one module, as its :class:`OpIslandMode` looks them up: per op
    name, the ordinals of its islands and the (location, occurrence) sites without one,
    each with the island's kind."""

    dtype: torch.dtype
    refs: tuple[OpRef, ...]
    narrow_outputs: bool = True
    # derived in __post_init__ (plain fields: dynamo reads them as constants)
    slots: dict[str, int] = field(init=False, compare=False)
    ordinals: tuple[dict[int, str], ...] = field(init=False, compare=False)
    sites: dict[tuple[str, str, int], str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        names = sorted({r.op for r in self.refs})
        slots = {n: i for i, n in enumerate(names)}
        by: list[dict[int, str]] = [{} for _ in names]
        for r in self.refs:
            if r.ordinal is not None:
                by[slots[r.op]][r.ordinal] = r.kind
        sites = {(r.op, r.location, r.occurrence): r.kind for r in self.refs if r.ordinal is None}
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "ordinals", tuple(by))
        object.__setattr__(self, "sites", sites)


# (module, op, location, occurrence) -> ordinal, while resolve_ordinals records
_RECORD: ContextVar[dict[tuple[str, str, str, int], int] | None] = ContextVar(
    "halfprec_op_ordinals", default=None
)


@contextlib.contextmanager
def recording_ordinals() -> Iterator[dict[tuple[str, str, str, int], int]]:
    """Record, for each op island found by its location inside this block, its ordinal
    (keyed by :attr:`OpRef.site`). One call of the model inside is enough."""
    found: dict[tuple[str, str, str, int], int] = {}
    token = _RECORD.set(found)
    try:
        yield found
    finally:
        _RECORD.reset(token)


class OpIslandMode(NamedOpMode):
    """One call of one module with op islands (see the module docs)."""

    def __init__(self, plan: OpPlan, module: nn.Module, name: str) -> None:
        super().__init__()
        self.plan, self.module, self.name = plan, module, name
        self.counts = [0] * len(plan.slots)
        self.occurrences: dict[tuple[str, str], int] = {}

    def on_op(
        self, func: Callable[..., Any], op: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        plan = self.plan
        if op in plan.slots:
            slot = plan.slots[op]
            nth = self.counts[slot]
            self.counts[slot] = nth + 1
            kind = plan.ordinals[slot].get(nth, "")
            if not kind and plan.sites:
                kind = self._at_site(op, nth)
            if kind == "scaled":
                with torch._C.DisableTorchFunction():
                    scaled = scale_operands(op, args, kwargs, plan.dtype)
                if scaled is not None:
                    out = func(*scaled.args, **scaled.kwargs)  # the GEMM in half
                    with torch._C.DisableTorchFunction():
                        return scaled.undo(out)
            if kind:  # fp32, or a scaled island whose call is no two-operand GEMM
                with torch._C.DisableTorchFunction():
                    wide = cast_floating(torch.float32)
                    args, kwargs = map_tensors(wide, args), map_tensors(wide, kwargs)
                return func(*args, **kwargs)
        with torch._C.DisableTorchFunction():
            to = self._carry(args, kwargs)
            if to is not None:
                args, kwargs = map_tensors(to, args), map_tensors(to, kwargs)
        return func(*args, **kwargs)

    def _carry(self, args: Any, kwargs: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Where a carried fp32 value meets half: half if every carried value fits, else
        fp32 for all (None: nothing to do)."""
        dtypes = _float_dtypes((args, kwargs))
        half = self.plan.dtype
        if half not in dtypes or torch.float32 not in dtypes:
            return None
        carried = [t for _, t in iter_tensors((args, kwargs)) if t.dtype == torch.float32]
        return cast_floating(half if all(fits(t, half) for t in carried) else torch.float32)

    def _at_site(self, op: str, nth: int) -> str:
        """The location path (Python frames: eager and non-strict export, not
        ``torch.compile``): the kind of the island at this call's site in this module,
        or "" where there is none."""
        if torch.compiler.is_compiling() and not torch.compiler.is_exporting():
            return ""
        location = own_op(sys._getframe(2), self.module)  # own_op skips halfprec frames
        if location is None:
            return ""
        occurrence = self.occurrences.get((op, location), 0)
        self.occurrences[(op, location)] = occurrence + 1
        kind = self.plan.sites.get((op, location, occurrence), "")
        record = _RECORD.get()
        if kind and record is not None:
            record.setdefault((self.name, op, location, occurrence), nth)
        return kind


@dataclass(frozen=True)
class OpSettings:
    plan: OpPlan
    name: str


class OpIslands(Behaviour):
    """Runs the module's ``forward`` under an :class:`OpIslandMode`; fp32 outputs that fit
    are cast back to half unless ``plan.narrow_outputs`` is off (the root, whose outputs
    its :class:`~halfprec.convert.boundaries.RootCast` casts, and the modules named in
    ``Recipe.fp32_outputs``, which hand them on in fp32)."""

    attr = "_halfprec_ops"

    @classmethod
    def label(cls, settings: OpSettings) -> str:
        refs = settings.plan.refs
        scaled = sum(r.scaled for r in refs)
        counts = ((len(refs) - scaled, "fp32"), (scaled, "scaled half"))
        ops = ", ".join(f"{n} {what} op{'s' if n != 1 else ''}" for n, what in counts if n)
        handoff = ", fp32 output" if settings.name and not settings.plan.narrow_outputs else ""
        return ops + handoff

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        s: OpSettings = getattr(self, OpIslands.attr)
        with OpIslandMode(s.plan, self, s.name):  # type: ignore[arg-type]
            out = super().forward(*args, **kwargs)  # type: ignore[misc]
        if not s.plan.narrow_outputs:
            return out
        half = s.plan.dtype

        def narrow(t: torch.Tensor) -> torch.Tensor:
            if t.dtype == torch.float32 and fits(t, half):
                return t.to(half)
            return t

        return map_tensors(narrow, out)


def with_ordinals(
    refs: Iterable[OpRef], found: dict[tuple[str, str, str, int], int]
) -> tuple[OpRef, ...]:
    """``refs`` with the ordinals :func:`recording_ordinals` found (others unchanged)."""
    return tuple(
        replace(r, ordinal=found[r.site]) if r.ordinal is None and r.site in found else r
        for r in refs
    )
