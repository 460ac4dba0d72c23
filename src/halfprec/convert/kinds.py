"""What kind of module a conversion meets, and which of its tensors stay fp32.

The default fp32 islands (:func:`is_default_island`: the norm layers, by type or by a
norm-like class name), the modules whose weights feed a GEMM or a lookup
(:func:`is_gemm_module`), scripted modules, and the small parameters and buffers that no
GEMM-type module owns (:func:`small_tensors`, ``Recipe.fp32_params_up_to``).
"""

from __future__ import annotations

import re

import torch
from torch import nn

from halfprec.convert.swap import base_class

DEFAULT_ISLAND_TYPES: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._BatchNorm,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.modules.instancenorm._InstanceNorm,
    nn.LocalResponseNorm,
    nn.RMSNorm,
)

# Modules whose weights feed a GEMM, or a lookup: these go half, as autocast casts a GEMM's
# weights to half at every call. Embedding tables go half too, though autocast keeps them
# fp32: they hold most of a language model's parameters, and a small fp32 table (BERT's
# two token types) would turn the whole residual stream it is added to into fp32. In a
# model with no GEMM at all (a table of hyperbolic or metric embeddings and a distance)
# nothing computes faster in half, so a small table is an ordinary small parameter there.
# Every other parameter or buffer (a learned scale, frequencies, a centre, a temperature) is
# used in elementwise math and stays fp32 when it is small (Recipe.fp32_params_up_to), as
# under autocast. transformers' Conv1D is matched by class name. TorchScript code has no op
# policy to run a GEMM that meets an fp32 operand, so a scripted module's tensors all go half.
LOOKUP_TYPES: tuple[type[nn.Module], ...] = (nn.Embedding, nn.EmbeddingBag)
GEMM_TYPES: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Bilinear,
    nn.modules.conv._ConvNd,
    *LOOKUP_TYPES,
    nn.MultiheadAttention,
    nn.RNNBase,
)
_GEMM_NAMES = frozenset({"Conv1D"})


def is_gemm_module(module: nn.Module, *, lookups: bool = True) -> bool:
    """True for a module whose own weights feed a GEMM or (unless ``lookups`` is off) a
    lookup (:data:`GEMM_TYPES`)."""
    if isinstance(module, LOOKUP_TYPES):
        return lookups
    if isinstance(module, GEMM_TYPES):
        return True
    return any(c.__name__ in _GEMM_NAMES for c in type(module).__mro__)


# Hand-written norms in model zoos (LlamaRMSNorm, T5LayerNorm, ...) are fragile the same way.
_NORM_NAME = re.compile(r"(RMS|Layer|Group|Batch|Instance)_?Norm(\dd)?$", re.IGNORECASE)


def is_default_island(module: nn.Module, *, root: bool = False) -> bool:
    """True for modules halfprec keeps in fp32 by default: the norm layers (by type, or by
    a norm-like class name such as ``LlamaRMSNorm``; the root only by type, so a model
    class named ``BigBatchNorm`` is not one whole fp32 island)."""
    if isinstance(module, DEFAULT_ISLAND_TYPES):
        return True
    if root:
        return False
    name = getattr(module, "original_name", base_class(module).__name__)  # TorchScript
    return bool(_NORM_NAME.search(str(name)))


def scripted(module: nn.Module) -> bool:
    return isinstance(module, torch.jit.ScriptModule)


def small_tensors(model: nn.Module, limit: int) -> set[int]:
    """Ids of the floating parameters and buffers of ``model`` that stay fp32 by
    ``Recipe.fp32_params_up_to`` (``limit``): no GEMM-type or scripted module owns them (a
    tied weight that one does goes half), nor a norm layer (fp32 as a norm island, or half
    where ``norm_islands=False`` asks for it), and they hold at most ``limit`` values."""
    if not limit:
        return set()
    # lookups count only where a GEMM computes in half (see GEMM_TYPES)
    lookups = any(is_gemm_module(m, lookups=False) for m in model.modules())
    gemm = {  # recurse: a parametrized weight lives in the module's ``parametrizations``
        id(t)
        for m in model.modules()
        if is_gemm_module(m, lookups=lookups)
        for t in (*m.parameters(), *m.buffers())
    }
    return {
        id(t)
        for name, m in model.named_modules()
        if not scripted(m) and not is_default_island(m, root=name == "")
        for t in (*m.parameters(recurse=False), *m.buffers(recurse=False))
        if t.is_floating_point() and id(t) not in gemm and t.numel() <= limit
    }
