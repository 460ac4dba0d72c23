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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from halfprec.dtypes import cast_floating
from halfprec.tree import iter_tensors, map_tensors

__all__ = [
    "AUTOCAST_FP32_OPS",
    "DEFAULT_FP32_OPS",
    "HALF_OPS",
    "NO_HALF_OPS",
    "Fp32OpsMode",
]

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
# Ops with no half kernel (CPU and CUDA alike) or whose half result means little.
NO_HALF_OPS: frozenset[str] = frozenset(
    {f"linalg_{n}" for n in dir(torch.linalg) if not n.startswith("_")} - _LINALG_GEMMS
    | {f"fft_{n}" for n in dir(torch.fft) if not n.startswith("_")}
    | {
        "view_as_complex", "polar", "complex", "stft", "istft", "cholesky",
        "cholesky_inverse", "cholesky_solve", "inverse", "pinverse", "det", "logdet",
        "slogdet", "svd", "qr", "lu_solve", "triangular_solve", "matrix_exp", "quantile",
        "nanquantile", "trace", "orgqr", "ormqr", "geqrf",
    }
)  # fmt: skip

DEFAULT_FP32_OPS: tuple[str, ...] = tuple(sorted(AUTOCAST_FP32_OPS | NO_HALF_OPS))

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


class Fp32OpsMode(TorchFunctionMode):
    """Computes ``fp32_ops`` in fp32 when they have a ``dtype`` operand; feeds GEMMs that
    mix an fp32 operand with a ``dtype`` one in ``dtype`` (see the module docs).

    Every torch call made under the mode (``.shape``, ``view`` and ``dropout`` included)
    comes through :meth:`__torch_function__`, so the calls it leaves alone take the
    shortest path: one name lookup in two sets, then the call itself, with no tree walk.
    """

    def __init__(self, dtype: torch.dtype, fp32_ops: frozenset[str]) -> None:
        super().__init__()
        self.dtype = dtype
        self.fp32_ops = fp32_ops

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = getattr(func, "__name__", "")
        wide = name in self.fp32_ops
        if wide or name in HALF_OPS:
            kwargs = kwargs or {}
            with torch._C.DisableTorchFunction():
                args, kwargs = self._operands(wide, args, kwargs)
            return func(*args, **kwargs)
        return func(*args, **kwargs) if kwargs else func(*args)

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
