"""Op-level fp32 islands: single operations inside a module's own code computed in fp32.

An op is named stably by the module that runs it, the op's name, its source location
(``file.py:line``, the innermost frame outside halfprec) and its occurrence (how many times
that op at that line already ran in the current call of the module)::

    OpRef(module="", op="exp", location="model.py:41", occurrence=0)

Inside a module that carries op islands, a ``TorchFunctionMode`` (active only during that
module's own calls) computes the named ops on fp32 copies of their inputs. The result stays
fp32: ops on it alone stay fp32 by promotion, and an op that mixes it with half tensors
casts it back to half when it fits the half range and otherwise runs in fp32 too, so an
island extends downstream for as long as the value is out of range. The module's outputs
are cast back to half where they fit; the next half module's boundary guard does the rest.
Ops of child modules are not this module's own code and are left alone.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
from torch import nn

from halfprec.convert.scope import NamedOpMode
from halfprec.dtypes import range_of
from halfprec.frames import is_library_file, is_torch_file
from halfprec.tree import iter_tensors, map_tensors

__all__ = ["OpRef", "OpIslands", "OwnOpMode", "fits", "install_op_islands", "own_op"]

_CALL_IMPL = nn.Module._call_impl.__code__
_TORCH_WRAPPERS = ("_tensor.py", "overrides.py", "_device.py", "_jit_internal.py")


@dataclass(frozen=True, order=True)
class OpRef:
    """One op in one module's own code: module name, op name, ``file:line``, occurrence."""

    module: str
    op: str
    location: str
    occurrence: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.module, str) or not self.op or ":" not in self.location:
            raise ValueError(
                f"OpRef needs a module name, an op name and a 'file.py:line' location, got {self!r}"
            )
        if self.occurrence < 0:
            raise ValueError(f"OpRef.occurrence must be >= 0, got {self.occurrence}")

    def __str__(self) -> str:
        return f"{self.module or '(model)'}: {self.op} at {self.location} #{self.occurrence}"

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpRef:
        return cls(
            module=str(data["module"]),
            op=str(data["op"]),
            location=str(data["location"]),
            occurrence=int(data.get("occurrence", 0)),
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
    """Every finite value of ``t`` lies within ``dtype``'s range (inf/NaN count as fitting).

    While ``torch.export`` traces, values are symbolic and a graph cannot branch on them, so
    nothing counts as fitting: carried fp32 values stay fp32 in exported graphs (``.pt2``,
    ONNX) until a half module's boundary casts them, never narrower than in Python."""
    if torch.compiler.is_exporting():
        return False
    if t.numel() == 0:
        return True
    peak = torch.nan_to_num(t.detach(), nan=0.0, posinf=0.0, neginf=0.0).abs().amax()
    return bool(peak <= range_of(dtype).max)


def _float_dtypes(args: Any) -> set[torch.dtype]:
    return {t.dtype for _, t in iter_tensors(args) if t.is_floating_point()}


def _cast(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t

    return cast


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


class OpIslands(OwnOpMode):
    """Computes the named ops of one module in fp32 and carries wide results (see above)."""

    def __init__(self, module: nn.Module, ops: Iterable[OpRef], dtype: torch.dtype) -> None:
        super().__init__(module)
        self.keys = {(r.op, r.location, r.occurrence) for r in ops}
        self.dtype = dtype
        self.wide = torch.float32

    def on_own_op(
        self, func: Callable[..., Any], ref: OpRef, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if (ref.op, ref.location, ref.occurrence) in self.keys:
            wide = _cast(self.wide)
            return func(*map_tensors(wide, args), **map_tensors(wide, kwargs))
        dtypes = _float_dtypes((args, kwargs))
        if self.dtype in dtypes and self.wide in dtypes:  # a carried fp32 value meets half
            carried = [t for _, t in iter_tensors((args, kwargs)) if t.dtype == self.wide]
            to = _cast(self.dtype if all(fits(t, self.dtype) for t in carried) else self.wide)
            return func(*map_tensors(to, args), **map_tensors(to, kwargs))
        return func(*args, **kwargs)


def install_op_islands(
    module: nn.Module, ops: Iterable[OpRef], dtype: torch.dtype, *, narrow_outputs: bool = True
) -> None:
    """Hooks that run ``module``'s calls under :class:`OpIslands` for ``ops``; fp32 outputs
    that fit are cast back to ``dtype`` unless ``narrow_outputs=False`` (the root, whose
    outputs are cast by the root's own hook)."""
    mode = OpIslands(module, ops, dtype)
    depth = threading.local()
    back = _cast(dtype)

    def enter(mod: nn.Module, args: tuple[Any, ...]) -> None:
        level = getattr(depth, "n", 0)
        if level == 0:
            mode.reset()
            mode.__enter__()
        depth.n = level + 1

    def leave(mod: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        depth.n -= 1
        if depth.n:
            return None
        mode.__exit__(None, None, None)
        if not narrow_outputs:
            return None

        def narrow(t: torch.Tensor) -> torch.Tensor:
            return back(t) if t.dtype == torch.float32 and fits(t, dtype) else t

        return map_tensors(narrow, output)

    module.register_forward_pre_hook(enter)
    module.register_forward_hook(leave, always_call=True)
