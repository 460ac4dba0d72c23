"""The operators and string arguments a vetted ``.pt2`` graph may hold: an explicit allow-list.

A ``.pt2`` program is data: every node names a torch operator and its arguments, and
running it calls those operators. Some aten operators reach outside the tensors they are
given (``aten.from_file(path, shared=True)`` maps any file the user can write into a
tensor, so a later ``fill_`` overwrites it; ``set_``/``resize_`` re-point or grow a
storage; ``_print`` writes to the process's stdout; ``_c10d_functional`` ops talk to other
processes). So a node is loaded only when its operator is listed here, and each string
argument only when its name is listed with the values it may take: a string is never a
path, a message to print, or a name to look up.

The list holds the operators halfprec's own exports contain across the Hugging Face test
matrix and the built-in models (``tests/integration/test_pt2_ops.py`` exports them and checks
every operator is allowed), the Core ATen operator set, and the common ``torch.nn``
layers' operators, without any that touch files, processes or storage. An in-place
variant (``add_``) is allowed with its operator (``add``): it writes only to a tensor of
the graph.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# aten operator packets (names without the overload), by what they compute
_ELEMENTWISE = """
abs acos acosh add addcdiv addcmul angle asin asinh atan atan2 atanh bitwise_and
bitwise_left_shift bitwise_not bitwise_or bitwise_right_shift bitwise_xor ceil clamp
clamp_max clamp_min clip copysign cos cosh deg2rad digamma div divide elu eq erf erfc
erfinv exp exp2 expm1 floor floor_divide fmax fmin fmod frac ge gelu glu gt hardshrink
hardsigmoid hardswish hardtanh heaviside hypot i0 isfinite isinf isnan isneginf isposinf
le leaky_relu lerp lgamma log log10 log1p log2 log_sigmoid logaddexp logaddexp2
logical_and logical_not logical_or logical_xor logit lt masked_fill maximum minimum mish
mul multiply nan_to_num ne neg negative nextafter polygamma positive pow prelu rad2deg
reciprocal relu relu6 remainder round rrelu rsqrt rsub selu sgn sigmoid sign signbit
silu sin sinc sinh softplus softshrink sqrt square sub subtract tan tanh threshold
true_divide trunc where xlogy __and__ __or__ __xor__ __lshift__ __rshift__
"""
_REDUCTIONS = """
all amax amin aminmax any histc bincount argmax argmin count_nonzero cummax cummin
cumprod cumsum logcumsumexp logsumexp max mean median min nanmean nansum norm prod std
std_mean sum topk var var_mean kthvalue mode sort argsort msort linalg_vector_norm
frobenius_norm
"""
_LINEAR_ALGEBRA = """
addbmm addmm addmv addr baddbmm bmm dot einsum inner linear matmul mm mv outer tensordot
vdot bilinear cdist _cdist_forward _pdist_forward
"""
_NN = """
_weight_norm _weight_norm_interface norm_except_dim _adaptive_avg_pool2d
_adaptive_avg_pool3d _convolution _embedding_bag _log_softmax _native_batch_norm_legit
_native_batch_norm_legit_functional _native_batch_norm_legit_no_training _softmax
_scaled_dot_product_efficient_attention _scaled_dot_product_flash_attention_for_cpu
_scaled_dot_product_attention_math adaptive_avg_pool1d adaptive_avg_pool2d
adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d
alpha_dropout avg_pool1d avg_pool2d avg_pool3d batch_norm col2im constant_pad_nd conv1d
conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d convolution
cosine_similarity dropout embedding embedding_bag feature_alpha_dropout feature_dropout
grid_sampler grid_sampler_2d group_norm im2col instance_norm layer_norm log_softmax
max_pool1d max_pool1d_with_indices max_pool2d max_pool2d_with_indices max_pool3d
max_pool3d_with_indices native_batch_norm native_dropout native_group_norm
native_layer_norm pad pairwise_distance pixel_shuffle pixel_unshuffle reflection_pad1d
reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d replication_pad3d
rms_norm scaled_dot_product_attention softmax upsample_bicubic2d upsample_bilinear2d
upsample_linear1d upsample_nearest1d upsample_nearest2d upsample_nearest3d
upsample_trilinear3d
"""
_SHAPE_AND_INDEX = """
_reshape_alias _unsafe_view adjoint alias alias_copy atleast_1d atleast_2d atleast_3d
broadcast_tensors broadcast_to cat chunk column_stack concat concatenate contiguous diag
diag_embed diagonal diagonal_copy diff dsplit dstack expand expand_as expand_copy
flatten flip fliplr flipud gather hsplit hstack index index_add index_copy index_fill
index_put index_reduce index_select masked_scatter masked_select meshgrid moveaxis
movedim narrow narrow_copy nonzero numpy_T permute permute_copy ravel repeat
repeat_interleave reshape reshape_as roll rot90 scatter scatter_add scatter_reduce
select select_copy select_scatter slice slice_copy slice_scatter split split_with_sizes
squeeze squeeze_copy stack swapaxes swapdims t t_copy take take_along_dim tensor_split
tile transpose transpose_copy tril tril_indices triu triu_indices unbind unflatten
unfold unsqueeze unsqueeze_copy vander view view_as view_copy vsplit vstack searchsorted
bucketize isin unique_consecutive
"""
_CREATION_AND_TYPES = """
_assert_tensor_metadata _to_copy arange bernoulli clone copy detach empty empty_like
empty_strided eye fill full full_like lift_fresh_copy linspace logspace multinomial
new_empty new_empty_strided new_full new_ones new_zeros normal ones ones_like rand
rand_like randint randint_like randn randn_like randperm scalar_tensor to type_as
uniform zero zeros zeros_like _local_scalar_dense item complex view_as_real
view_as_complex polar real imag conj resolve_conj resolve_neg
"""
_SYMBOLIC = """
sym_size sym_numel sym_stride sym_storage_offset sym_is_contiguous sym_constrain_range
sym_constrain_range_for_size _assert_scalar _assert_async _functional_assert_scalar
_functional_assert_async _is_all_true _is_any_true
"""

ALLOWED_ATEN: frozenset[str] = frozenset(
    " ".join(
        (_ELEMENTWISE, _REDUCTIONS, _LINEAR_ALGEBRA, _NN, _SHAPE_AND_INDEX)
        + (_CREATION_AND_TYPES, _SYMBOLIC)
    ).split()
)

# operators of other libraries' namespaces, by qualified name: transformers' grouped
# matrix product for mixture-of-experts layers (registered when transformers is imported)
ALLOWED_OTHER: frozenset[str] = frozenset({"transformers::grouped_mm_fallback"})

# torch.ops.higher_order operators that only run subgraphs of the same program
ALLOWED_HIGHER_ORDER: frozenset[str] = frozenset(
    {"cond", "while_loop", "scan", "map_impl", "wrap_with_set_grad_enabled", "wrap_with_autocast"}
)

_REDUCE = {"sum", "prod", "mean", "amax", "amin", "add", "multiply"}
_MESSAGE = re.compile(r"^[ -~]{0,400}$")  # printable ASCII: an assertion's message
_EQUATION = re.compile(r"^[A-Za-z., \->]{1,200}$")  # an einsum equation


def _one_of(*values: str) -> Callable[[str], bool]:
    return lambda text: text in values


# string argument name -> the values it may take (every other string argument is refused)
_STRING_ARGS: dict[str, Callable[[str], bool]] = {
    "approximate": _one_of("none", "tanh"),
    "rounding_mode": _one_of("trunc", "floor"),
    "reduce": lambda text: text in _REDUCE,
    "padding": _one_of("same", "valid"),
    "mode": _one_of("constant", "reflect", "replicate", "circular"),
    "indexing": _one_of("ij", "xy"),
    "interpolation": _one_of("linear", "lower", "higher", "midpoint", "nearest"),
    "side": _one_of("left", "right"),
    "equation": lambda text: _EQUATION.match(text) is not None,
    "assert_msg": lambda text: _MESSAGE.match(text) is not None,
}


def refusal(op: Any, node: dict[str, Any]) -> str | None:
    """Why the node calling ``op`` (an OpOverload or HigherOrderOperator) is refused, or
    ``None`` when its operator and every string argument are allowed."""
    why = _operator_refusal(op)
    if why is not None:
        return why
    for arg in node.get("inputs") or []:
        if not isinstance(arg, dict) or not isinstance(arg.get("arg"), dict):
            continue
        value = arg["arg"]
        strings = [value["as_string"]] if "as_string" in value else value.get("as_strings")
        if strings is None:
            continue
        check = _STRING_ARGS.get(str(arg.get("name")))
        for text in strings if isinstance(strings, list) else [strings]:
            if check is None or not isinstance(text, str) or not check(text):
                return f"passes the string {str(text)[:60]!r} as {str(arg.get('name'))[:40]!r}"
    return None


def _operator_refusal(op: Any) -> str | None:
    import torch

    if isinstance(op, torch._ops.HigherOrderOperator):
        if op.name() in ALLOWED_HIGHER_ORDER:
            return None
        return f"calls the higher-order operator {op.name()!r}, which is not on the allow-list"
    namespace, _, name = op._schema.name.partition("::")
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    if (namespace == "aten" and base in ALLOWED_ATEN) or op._schema.name in ALLOWED_OTHER:
        return None
    return f"calls {namespace}.{name}, which is not on the allow-list of operators"
