"""Load a half checkpoint without ever building the fp32 model in memory.

``load(path, into=build)`` with a *callable* ``build`` (rather than a built model) calls
it inside :func:`parameters_on_meta`, so the model's parameters live on the meta device
(shapes and dtypes, no memory); buffers stay real, because non-persistent buffers
(``position_ids``, rotary frequencies) are computed in ``__init__`` and never saved. The
meta model is converted exactly as ``load`` into a built model would convert it (same
dtype, same islands, same hooks), and then every parameter is filled from the file in the
dtype the conversion gave it: half for half modules, fp32 for islands. A tensor already in
that dtype in the file becomes a copy-on-write view of the file's pages
(:meth:`TensorFile.mapped`, as ``from_pretrained`` loads): nothing is read or copied until
the model uses it. A tensor that needs a cast is read, cast, and the read copy let go.
Tied parameters stay tied. Peak memory is the half model plus one tensor. While building,
in-place initialisation of meta parameters (``nn.init``, ``normal_``...) is skipped.

For an fp32 checkpoint (``convert --weights``), the islands that :func:`halfprec.convert`
would add because a value overflows the half dtype are decided from the file, one tensor
at a time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from halfprec.convert.core import RecipeLike, convert_
from halfprec.convert.recipe import Recipe
from halfprec.dtypes import range_of
from halfprec.errors import CheckpointError
from halfprec.io.tensorfile import TensorFile
from halfprec.io.truth import check_against_recipe, check_plain
from halfprec.modules import finite_peak, first_line

__all__ = [
    "parameters_on_meta",
    "build_on_meta",
    "overflowing_modules",
    "existing_modules",
    "materialize_",
    "check_names",
    "load_built_on_meta",
    "MetaBuildError",
]

Builder = Callable[[], nn.Module]


# In-place ops that change a tensor's values and nothing else (not its shape, strides,
# dtype or flags): the ways layers and ``nn.init`` initialise parameters. ``nn.init``'s own
# functions reach a torch function mode as themselves, with the tensor as ``tensor=``.
_VALUE_OPS = frozenset(
    {
        *("normal_", "uniform_", "zero_", "fill_", "copy_", "random_", "exponential_"),
        *("bernoulli_", "cauchy_", "log_normal_", "geometric_", "erfinv_", "mul_", "add_"),
        *("sub_", "div_", "clamp_", "clamp_min_", "clamp_max_", "fill_diagonal_"),
        *("masked_fill_", "abs_", "neg_", "sqrt_", "exp_"),
        *("trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_", "orthogonal_"),
        *("xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"),
        "sparse_",
    }
)


class _EmptyOnMeta(TorchFunctionMode):
    """``torch.empty`` without a device makes meta tensors: layers allocate their
    parameters that way before initialising them, so nothing real is ever allocated. An
    in-place value op (:data:`_VALUE_OPS`) on a meta tensor returns it at once: a meta
    tensor has no values, and torch's meta kernels for random initialisation cost about a
    millisecond each (a third of building BERT-base)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.empty and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        elif getattr(func, "__name__", "") in _VALUE_OPS:
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Inside, every parameter a module registers is moved to the meta device as it is
    registered (layers then initialise it on meta, for free), and ``torch.empty`` without
    a device makes meta tensors; buffers made any other way stay real.
    ``nn.Module.register_parameter`` is restored on exit. Not thread-safe: other threads
    building modules meanwhile get meta parameters too."""
    original = nn.Module.register_parameter

    def register(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and not param.is_meta:
            kind = type(param)
            param = kind(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)

    nn.Module.register_parameter = register  # type: ignore[method-assign, assignment]
    try:
        with _EmptyOnMeta():
            yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


class MetaBuildError(CheckpointError):
    """``build()`` cannot run on the meta device: it computes on its weights while it
    builds (a k-means initialisation, a weight-dependent buffer). ``reason``: its error."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the builder cannot run on the meta device ({reason})")
        self.reason = reason


def build_on_meta(build: Builder) -> nn.Module:
    """``build()`` with its parameters on the meta device (see :func:`parameters_on_meta`).
    Raises :class:`MetaBuildError` when the builder cannot run there."""
    try:
        with parameters_on_meta():
            model = build()
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        # transformers' from_pretrained refuses the meta device with a ValueError
        # ("Unsupported device type 'meta'"); torch's own ops raise the other two
        if "meta" not in str(exc).lower():
            raise
        raise MetaBuildError(first_line(exc)) from None
    if not isinstance(model, nn.Module):
        raise CheckpointError(
            f"into= must be a model or a callable returning one; it returned {type(model).__name__}"
        )
    return model.eval()


def overflowing_modules(source: TensorFile, dtype: torch.dtype) -> list[str]:
    """Modules owning a tensor in ``source`` whose finite values exceed ``dtype``'s range
    (what :func:`halfprec.convert` keeps in fp32 as out of range), read one at a time."""
    limit = range_of(dtype).max
    owners = []
    for name in source.names():
        if not source.dtype(name).is_floating_point:
            continue
        t = source.get(name)
        if t.numel() and finite_peak(t) > limit:
            owners.append(name.rpartition(".")[0])
        del t
    return list(dict.fromkeys(owners))


def _names(model: nn.Module) -> dict[int, list[str]]:
    """id of each parameter/buffer -> every state-dict-style name it has (tied ones share)."""
    names: dict[int, list[str]] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for kind in (module._parameters, module._buffers):
            for local, t in kind.items():
                if t is not None:
                    names.setdefault(id(t), []).append(f"{prefix}.{local}" if prefix else local)
    return names


def check_names(model: nn.Module, source: TensorFile) -> None:
    """Raise :class:`CheckpointError` when ``source`` holds tensors ``model`` has not."""
    known = {n for names in _names(model).values() for n in names}
    unexpected = [k for k in source.names() if k not in known]
    if unexpected:
        raise _mismatch(model, source, "unexpected", unexpected)


def check_covers(model: nn.Module, source: TensorFile) -> None:
    """Raise :class:`CheckpointError` when ``source`` lacks one of ``model``'s state-dict
    tensors (a tied one under any of its names) or holds it in another shape."""
    aliases = _names(model)
    seen: set[int] = set()
    missing: list[str] = []
    for _, module in model.named_modules(remove_duplicate=False):
        skip = module._non_persistent_buffers_set
        for store in (module._parameters, module._buffers):
            for local, t in store.items():
                if t is None or id(t) in seen or (store is module._buffers and local in skip):
                    continue
                seen.add(id(t))
                name = next((n for n in aliases[id(t)] if n in source), None)
                if name is None:
                    missing.append(aliases[id(t)][0])
                elif source.shape(name) != tuple(t.shape):
                    raise _wrong_shape(source, name, t)
    if missing:
        raise _mismatch(model, source, "missing", missing)


def _mismatch(model: nn.Module, source: TensorFile, what: str, names: list[str]) -> CheckpointError:
    return CheckpointError(
        f"{source.path} does not match {type(model).__name__}: {what} "
        f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}; "
        "load it into the same architecture it was saved from"
    )


def _wrong_shape(source: TensorFile, name: str, t: torch.Tensor) -> CheckpointError:
    return CheckpointError(
        f"{source.path}: {name} has shape {source.shape(name)} but the model's is "
        f"{tuple(t.shape)}; load it into the same architecture it was saved from"
    )


def materialize_(model: nn.Module, source: TensorFile, *, strict: bool = True) -> nn.Module:
    """Replace ``model``'s meta parameters (and its buffers found in ``source``) with
    ``source``'s tensors, each cast to the dtype the model holds it in. Tied parameters get
    one tensor. ``strict``: every meta tensor must be in the file, and every file tensor in
    the model."""
    aliases = _names(model)
    if strict:
        check_names(model, source)
    done: dict[int, torch.Tensor] = {}
    missing: list[str] = []
    for _, module in model.named_modules(remove_duplicate=False):
        for store in (module._parameters, module._buffers):
            for local, old in list(store.items()):
                if old is None:
                    continue
                if id(old) not in done:
                    new = _read(old, aliases[id(old)], source)
                    if new is None:
                        if old.is_meta:
                            missing.append(aliases[id(old)][0])
                        continue
                    done[id(old)] = new
                store[local] = done[id(old)]
    if missing and strict:
        raise _mismatch(model, source, "missing", missing)
    return model


def _read(old: torch.Tensor, names: list[str], source: TensorFile) -> torch.Tensor | None:
    name = next((n for n in names if n in source), None)
    if name is None:
        return None
    if source.shape(name) != tuple(old.shape):
        raise _wrong_shape(source, name, old)
    cast = old.is_floating_point() and source.dtype(name).is_floating_point
    if cast and source.dtype(name) != old.dtype:
        value = source.get(name).to(old.dtype)  # read, cast, and the read copy let go
    else:
        value = source.mapped(name)  # kept as it is in the file: its pages, no copy
    if isinstance(old, nn.Parameter):
        return type(old)(value, requires_grad=old.requires_grad)
    return value


def load_built_on_meta(
    path: str | os.PathLike[str] | TensorFile,
    build: Builder,
    *,
    config: RecipeLike = None,
    in_range: bool = False,
    strict: bool = True,
    described_by: str | None = None,
) -> nn.Module:
    """``build()`` on the meta device, converted by ``config`` (None: nothing converted,
    the tensors load as they are), filled from ``path``. Unless ``in_range`` (a half
    file, whose values fit by construction), modules whose values in the file overflow
    the dtype become islands too, as :func:`halfprec.convert` would make them.

    ``described_by`` names where ``config`` came from when it is the file's own recipe
    (its metadata, a side-car file): every tensor must then have exactly the dtype the
    converted model holds it in (:func:`~halfprec.io.truth.check_against_recipe`).
    Otherwise the file is a plain checkpoint (:func:`~halfprec.io.truth.check_plain`).
    Everything is checked before any tensor is read."""
    source = path if isinstance(path, TensorFile) else TensorFile(path)
    model = build_on_meta(build)
    if strict:
        check_names(model, source)
    if described_by is None:
        check_plain(model, source, source.path)
    if config is not None:
        cfg = Recipe.of(config)
        half = cfg.resolve().dtype
        extra = [] if in_range else existing_modules(model, overflowing_modules(source, half))
        convert_(model, cfg.replace(dtype=half, keep_fp32=(*cfg.keep_fp32, *extra)))
        if described_by is not None:
            check_against_recipe(model, source, source.path, described_by, half)
    materialize_(model, source, strict=strict)
    return model


def existing_modules(model: nn.Module, keep: Sequence[Any]) -> list[Any]:
    """``keep`` without names of no module (a root-level parameter's owner is ``""``)."""
    names = {n for n, _ in model.named_modules() if n}
    return [k for k in dict.fromkeys(keep) if not isinstance(k, str) or k in names or "*" in k]
