"""The default op policy: the ops autocast computes in fp32 are computed in fp32 here too.

``model.half()`` runs every op in half. ``torch.autocast`` keeps a list of ops whose half
result is unsafe (exponentials, logarithms, powers, softmax, sums and cumulative sums,
norms, losses, distances) and computes them in fp32; on CUDA that list is long, on CPU
much shorter. halfprec applies one list on every device (:data:`AUTOCAST_FP32_OPS`, CUDA
autocast's own fp32 list), plus the ops that have no half kernel or no half meaning
(:data:`NO_HALF_OPS`: ``torch.linalg`` decompositions, ``torch.fft``, complex ops,
``cdist``, quantiles). The GEMMs stay half: where an fp32 result of such an op meets a half
operand in a matmul, linear or convolution (:data:`HALF_OPS`), the fp32 operand is cast to
half, as autocast casts it.

The list is the recipe's ``fp32_ops`` (:data:`DEFAULT_FP32_OPS` by default, ``()`` turns
the policy off), so it is visible, saved with the recipe, and can be narrowed or extended.
The root runs its forward under :class:`Fp32OpsMode`; inside an fp32 island every operand
is already fp32, so nothing changes there. Internal casts run with torch functions
disabled, so other modes never see them. A torch function written in Python runs its inner
calls out of the mode's sight (a mode is set aside while it handles a call), so
``F.multi_head_attention_forward`` counts as one GEMM.

Why a Python mode and not native ``torch.autocast`` (C++, no Python cost per call): CPU
autocast's fp32 list leaves ``exp``, ``log``, ``pow``, ``softmax``, ``sum``, ``cumsum`` and
the norms in half; CUDA's has them but not ``var``/``std``, ``torch.fft`` or the
``torch.linalg`` solvers; on both devices autocast also runs a GEMM whose operands are
all fp32 (an fp32 island's) in half, and on CUDA its ``layer_norm``/``group_norm`` hand
back fp32 where norm islands hand back the caller's dtype. So the mode stays, cheap where
it does nothing: a call it does not intercept costs a name lookup on top of what any
TorchFunctionMode costs (``benchmarks/op_policy_cost.py``). Under ``torch.compile`` it is
traced away.

A call the mode passes on unchanged still costs a Python call, ~5 us on this project's
CPU. So a built-in leaf module whose ``forward`` makes only calls the mode passes on
(:data:`LEAF_CALLS`: an ``Embedding``, a norm, a dropout, an activation, a ``Linear`` or
conv whose operands share one dtype) gets the :class:`PolicyLeaf` behaviour: it runs with
the mode off the stack, the same calls without the Python. Modes outside the policy's still
see every call, and a leaf that a mode inside the policy's reaches (an op island's, a
fill's) takes the usual path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from halfprec.convert.swap import Behaviour
from halfprec.dtypes import cast_floating
from halfprec.tree import iter_tensors, map_tensors

# CUDA autocast's "ops that can autocast to float32" (torch's AMP docs), by torch function
# name (``Tensor.__rpow__`` and friends keep their dunder names), plus variance and standard
# deviation. The norm layers are left out: halfprec's norm islands compute them in fp32
# and hand back the caller's dtype.
AUTOCAST_FP32_OPS: frozenset[str] = frozenset(
    {
        "__rpow__", "__rtruediv__", "__rdiv__", "acos", "asin", "cosh", "erfinv", "exp",
        "expm1", "log", "log10", "log1p", "log2", "logsumexp", "pow", "reciprocal", "rsqrt",
        "sinh", "tan", "softplus", "softmax", "softmin", "log_softmax", "cumprod", "cumsum",
        "sum", "prod", "dist", "pdist", "cdist", "renorm", "norm", "normalize",
        "cosine_similarity", "binary_cross_entropy_with_logits", "cosine_embedding_loss",
        "cross_entropy", "hinge_embedding_loss", "kl_div", "l1_loss", "margin_ranking_loss",
        "mse_loss", "multilabel_margin_loss", "multi_margin_loss", "nll_loss",
        "poisson_nll_loss", "smooth_l1_loss", "soft_margin_loss", "triplet_margin_loss",
        "var", "std", "var_mean", "std_mean",
    }
)  # fmt: skip

_LINALG_GEMMS = {"linalg_matmul", "linalg_multi_dot", "linalg_vecdot"}


def _functions(namespace: ModuleType, prefix: str) -> set[str]:
    """The functions of ``namespace`` by the name a mode sees them under (``fft_rfft``,
    ``linalg_svd``): not the classes, modules and docstring fragments it also holds."""
    return {
        f"{prefix}_{n}"
        for n in dir(namespace)
        if not n.startswith("_")
        and callable(value := getattr(namespace, n))
        and not isinstance(value, type)
    }


# Ops with no half kernel (CPU and CUDA alike) or whose half result means little.
NO_HALF_OPS: frozenset[str] = frozenset(
    _functions(torch.linalg, "linalg") - _LINALG_GEMMS
    | _functions(torch.fft, "fft")
    | {
        "view_as_complex", "polar", "complex", "stft", "istft", "cholesky",
        "cholesky_inverse", "cholesky_solve", "inverse", "pinverse", "det", "logdet",
        "slogdet", "svd", "qr", "lu_solve", "triangular_solve", "matrix_exp", "quantile",
        "nanquantile", "trace", "orgqr", "ormqr", "geqrf",
    }
)  # fmt: skip

DEFAULT_FP32_OPS: tuple[str, ...] = tuple(sorted(AUTOCAST_FP32_OPS | NO_HALF_OPS))

# Names that recipes written by older versions list in their default policy (taken from
# ``dir()``: a class, the torch module, docstring fragments): no call has them, so a recipe
# that lists them still has the default policy.
LEGACY_NON_OPS: frozenset[str] = frozenset(
    {"fft_Tensor", "fft_torch", "fft_common_args", "fft_factory_common_args",
     "linalg_LinAlgError", "linalg_common_notes"}
)  # fmt: skip


def is_default_policy(fp32_ops: frozenset[str]) -> bool:
    """True when ``fp32_ops`` is :data:`DEFAULT_FP32_OPS` (as older recipes wrote it too)."""
    return fp32_ops - LEGACY_NON_OPS == frozenset(DEFAULT_FP32_OPS)


# Autocast's lower-precision list: these take half operands. ``multi_head_attention_forward``
# is Python, so the GEMMs inside it run out of the mode's sight: it counts as one GEMM.
HALF_OPS: frozenset[str] = frozenset(
    {
        "__matmul__", "__rmatmul__", "matmul", "mm", "bmm", "mv", "addmm", "addbmm", "addmv",
        "addr", "baddbmm", "chain_matmul", "linear", "bilinear", "conv1d", "conv2d", "conv3d",
        "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "einsum",
        "scaled_dot_product_attention", "multi_head_attention_forward", *_LINALG_GEMMS,
    }
)  # fmt: skip


# Built-in modules whose ``forward`` makes no torch calls but these (each one torch
# function: what runs inside it is out of a mode's sight; a conv pads first unless its
# padding mode is "zeros"). Only these exact types: a subclass may override ``forward``.
LEAF_CALLS: dict[type[nn.Module], frozenset[str]] = {
    nn.Linear: frozenset({"linear"}),
    nn.Conv1d: frozenset({"conv1d", "pad"}),
    nn.Conv2d: frozenset({"conv2d", "pad"}),
    nn.Conv3d: frozenset({"conv3d", "pad"}),
    nn.Embedding: frozenset({"embedding"}),
    nn.LayerNorm: frozenset({"layer_norm"}),
    nn.GroupNorm: frozenset({"group_norm"}),
    nn.Dropout: frozenset({"dropout"}),
    nn.ReLU: frozenset({"relu"}),
    nn.GELU: frozenset({"gelu"}),
    nn.SiLU: frozenset({"silu"}),
    nn.Tanh: frozenset({"tanh"}),
    nn.Sigmoid: frozenset({"sigmoid"}),
}

# Arguments that hold no tensor (``torch.Size`` is a tuple of ints).
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.Size)


def _flat_operands(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor] | None:
    """The tensor operands of a call whose tensors are all top-level arguments (``linear(x,
    w, b)``, ``sum(x, dim=(1, 2))``), or None where another object may hold one
    (``einsum``'s operand list): then the tree walk decides."""
    tensors = []
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, torch.Tensor):
            tensors.append(a)
        elif not isinstance(a, _PLAIN) and not (
            isinstance(a, (list, tuple)) and all(isinstance(v, _PLAIN) for v in a)
        ):
            return None
    return tensors


def _cast(
    dtype: torch.dtype, args: tuple[Any, ...], kwargs: dict[str, Any], flat: bool
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    cast = cast_floating(dtype)
    if not flat:
        return map_tensors(cast, args), map_tensors(cast, kwargs)
    args = tuple(cast(a) if isinstance(a, torch.Tensor) else a for a in args)
    kwargs = {k: cast(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    return args, kwargs


# What the mode does with each torch function (by function object, per fp32 list): _PASS it
# on, feed a _GEMM half, or compute it _WIDE (fp32). A cache: reading a builtin's
# ``__name__`` makes a new string to hash, on every call the mode sees (there are a few
# hundred torch functions; _MEMO caps it anyway).
_PASS, _GEMM, _WIDE = 0, 1, 2
_LOOKS: dict[frozenset[str], dict[Any, int]] = {}
_is_compiling = torch.compiler.is_compiling  # one global lookup per call, not two attributes
_MEMO = 4096


class Fp32OpsMode(TorchFunctionMode):
    """Computes ``fp32_ops`` in fp32 when they have a ``dtype`` operand; feeds GEMMs that
    mix an fp32 operand with a ``dtype`` one in ``dtype`` (see the module docs).

    Every torch call made under the mode (``.shape``, ``view`` and ``dropout`` included)
    comes through :meth:`__torch_function__`, so the calls it leaves alone take the
    shortest path: one dictionary lookup of the function, then the call itself.
    """

    def __init__(self, dtype: torch.dtype, fp32_ops: frozenset[str]) -> None:
        super().__init__()
        self.dtype = dtype
        self.fp32_ops = fp32_ops
        if _is_compiling():  # traced: reading or filling the shared cache would be guarded
            self._looks: dict[Any, int] = {}  # on, and the next call would compile again
            return
        looks = _LOOKS.get(fp32_ops)
        if looks is None:
            looks = {}
            if len(_LOOKS) < _MEMO:
                _LOOKS[fp32_ops] = looks
        self._looks = looks

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if _is_compiling():  # traced: no cache (dynamo would guard on its contents)
            look = self._kind(func)
        else:
            try:
                cached = self._looks.get(func)
            except TypeError:  # an unhashable callable
                cached = None
            look = self._look_at(func) if cached is None else cached
        if look:
            kwargs = kwargs or {}
            with torch._C.DisableTorchFunction():
                args, kwargs = self._operands(look == _WIDE, args, kwargs)
            return func(*args, **kwargs)
        return func(*args, **kwargs) if kwargs else func(*args)

    def _kind(self, func: Callable[..., Any]) -> int:
        """_WIDE for an op on the fp32 list, else _GEMM for a GEMM, else _PASS."""
        name = getattr(func, "__name__", "")
        return _WIDE if name in self.fp32_ops else _GEMM if name in HALF_OPS else _PASS

    def _look_at(self, func: Callable[..., Any]) -> int:
        look = self._kind(func)
        # (a method bound to a tensor would keep the tensor alive in the cache)
        if len(self._looks) < _MEMO and not isinstance(
            getattr(func, "__self__", None), torch.Tensor
        ):
            with contextlib.suppress(TypeError):  # an unhashable callable
                self._looks[func] = look
        return look

    def passes_on(self, calls: frozenset[str], one_dtype: bool) -> bool:
        """True when the mode hands each of ``calls`` on unchanged: none is on its fp32
        list, and where one is a GEMM, its floating operands share ``one_dtype``."""
        return self.fp32_ops.isdisjoint(calls) and (one_dtype or HALF_OPS.isdisjoint(calls))

    def _operands(
        self, wide: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        flat = _flat_operands(args, kwargs)
        tensors = flat if flat is not None else [t for _, t in iter_tensors((args, kwargs))]
        dtypes = {t.dtype for t in tensors}
        if self.dtype not in dtypes:
            return args, kwargs
        if wide:
            return _cast(torch.float32, args, kwargs, flat is not None)
        if torch.float32 in dtypes:  # fp32 meets half in a GEMM
            return _cast(self.dtype, args, kwargs, flat is not None)
        return args, kwargs


def _pop_policy() -> Fp32OpsMode | None:
    """Takes the policy's mode off the torch function mode stack when it is the innermost
    mode (the one a call made now meets first) and returns it; else changes nothing and
    returns None. Not for ``torch.compile``, which traces the mode away: the leaves
    (:class:`PolicyLeaf`, a guarded leaf's ``Guard``) check that before they call
    :func:`run_leaf`, once per call."""
    if not torch._C._len_torch_function_stack():
        return None
    mode = torch._C._pop_torch_function_stack()
    if isinstance(mode, Fp32OpsMode):
        return mode
    torch._C._push_on_torch_function_stack(mode)
    return None


def _one_dtype(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """True when the floating tensors among ``args``, ``kwargs`` and ``module``'s own
    parameters all have one dtype (read with torch functions off)."""
    seen = None
    with torch._C.DisableTorchFunction():
        for t in (*args, *kwargs.values(), *module._parameters.values()):
            if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
                if seen is not None and t.dtype != seen:
                    return False
                seen = t.dtype
    return True


@dataclass(frozen=True)
class LeafSettings:
    """``calls``: every torch call the leaf's ``forward`` makes (:data:`LEAF_CALLS`);
    ``gemm``: one of them is a GEMM (:data:`HALF_OPS`)."""

    calls: frozenset[str]
    gemm: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gemm", not HALF_OPS.isdisjoint(self.calls))


def run_leaf(
    forward: Callable[..., Any],
    calls: frozenset[str],
    one_dtype: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """``forward(*args, **kwargs)`` of a built-in leaf that makes only ``calls`` (its
    floating operands of ``one_dtype`` or not): with the policy's mode off the stack when
    it is the innermost mode and would pass each call on unchanged. The mode is back on
    afterwards, also when ``forward`` raises. Eager mode only (see :func:`_pop_policy`)."""
    policy = _pop_policy()
    if policy is not None:
        try:
            if policy.passes_on(calls, one_dtype):
                return forward(*args, **kwargs)
        finally:
            torch._C._push_on_torch_function_stack(policy)
    return forward(*args, **kwargs)


class PolicyLeaf(Behaviour):
    """A built-in leaf runs through :func:`run_leaf` (the innermost behaviour: it sees the
    operands after an island's casts). A guarded half leaf's guard does this itself."""

    attr = "_halfprec_leaf"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():  # the mode is traced away: nothing to set aside
            return super().forward(*args, **kwargs)  # type: ignore[misc]
        s: LeafSettings = getattr(self, PolicyLeaf.attr)
        one = s.gemm and _one_dtype(self, args, kwargs)  # type: ignore[arg-type]
        return run_leaf(super().forward, s.calls, one, args, kwargs)  # type: ignore[misc]
