"""fp32 master weights behind half-precision parameters (``MixedPrecision`` master mode).

The model's parameters are cast once to bf16/fp16, so forward and backward run at half
precision's speed with no per-forward weight casts. Each parameter the optimizers hold gets
an fp32 *master* copy, and the optimizers are rebound to the masters: their state (Adam
moments) is fp32 and their update is fp32's, as in Megatron's
``Float16OptimizerWithFloat16Params`` and DeepSpeed's ``BF16_Optimizer``. After backward,
the half gradients are added into fp32 gradients on the masters and dropped; after an
applied step, the masters are rounded back into the parameters with one ``_foreach_copy_``.

So a model parameter is always the master rounded to nearest: a checkpoint stores the
masters as the model's weights (fp32, the same file an AMP run writes) and resuming from it
restores the parameters bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from halfprec.train.config import TrainingStateError

# Batch norm's affine parameters stay fp32 (as apex's keep_batchnorm_fp32): its kernels
# take half inputs with fp32 weights and running statistics, not half weights with fp32
# statistics. An fp32 parameter needs no master: the optimizer updates it as it is.
_KEEP_FP32 = (nn.modules.batchnorm._BatchNorm,)


def is_sharded(model: nn.Module) -> bool:
    """True when ``model``'s parameters are DTensors (FSDP2's ``fully_shard``): FSDP2 keeps
    fp32 sharded master weights itself and casts them for compute (``fsdp_policy``)."""
    return any(callable(getattr(p, "full_tensor", None)) for p in model.parameters())


class MasterWeights:
    """The (half parameter, fp32 master) pairs of one model and its optimizers."""

    def __init__(
        self,
        model: nn.Module,
        optimizers: Sequence[torch.optim.Optimizer],
        dtype: torch.dtype,
    ) -> None:
        held = {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
        kept = {id(p) for m in model.modules() if isinstance(m, _KEEP_FP32) for p in m.parameters()}
        params = [p for p in model.parameters() if id(p) in held and id(p) not in kept]
        _check_castable(params, optimizers)
        with torch.no_grad():
            self.masters: list[torch.Tensor] = [
                nn.Parameter(p.detach().to(torch.float32, copy=True), p.requires_grad)
                for p in params
            ]
            for param in params:  # in place, so hooks, ties and wrappers keep seeing it
                param.data = param.data.to(dtype)
        self.params: list[torch.Tensor] = list(params)
        swap = {id(p): m for p, m in zip(params, self.masters, strict=True)}
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                group["params"] = [swap.get(id(p), p) for p in group["params"]]
        pairs = zip(self.params, self.masters, strict=True)
        self.alias: dict[int, torch.Tensor] = {id(m): p for p, m in pairs}

    def gather_grads(self) -> None:
        """Add the parameters' half gradients into the masters' fp32 gradients (set where
        a master has none: the first micro-batch after ``zero_grad``) and drop the half
        ones, so micro-batches accumulate in fp32."""
        for param, master in zip(self.params, self.masters, strict=True):
            grad = param.grad
            if grad is None:
                continue
            if master.grad is None:
                master.grad = grad.to(torch.float32)
            else:
                master.grad.add_(grad)
            param.grad = None

    def copy_back(self) -> None:
        """Round the masters into the half parameters (after an applied step)."""
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.masters)

    def state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """``model.state_dict()`` with each half parameter replaced by its fp32 master."""
        by_param = {id(p): m for p, m in zip(self.params, self.masters, strict=True)}
        state = model.state_dict()
        for name, param in model.named_parameters(remove_duplicate=False):
            master = by_param.get(id(param))
            if master is not None and name in state:
                state[name] = master.detach()
        return state

    def load(self, model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        """Set the masters from fp32 weights saved by :meth:`state_dict` (or by an AMP run)
        and round them into the parameters."""
        by_param = {id(p): m for p, m in zip(self.params, self.masters, strict=True)}
        with torch.no_grad():
            for name, param in model.named_parameters(remove_duplicate=False):
                master = by_param.get(id(param))
                if master is not None and name in state:
                    master.copy_(state[name])
        self.copy_back()


def _check_castable(
    params: Sequence[nn.Parameter],
    optimizers: Sequence[torch.optim.Optimizer],
) -> None:
    if not params:
        raise TrainingStateError(
            "use_master_weights() found none of the model's parameters in the optimizers; "
            "build the optimizer over model.parameters() first"
        )
    for optimizer in optimizers:
        if optimizer.state:
            raise TrainingStateError(
                "use_master_weights() got an optimizer that has already stepped; call it "
                "right after building the optimizer (load a checkpoint after it)"
            )
    wrong = sorted({str(p.dtype) for p in params if p.dtype != torch.float32})
    if wrong:
        raise TrainingStateError(
            f"use_master_weights() needs fp32 parameters (the masters are made from them), "
            f"found {', '.join(wrong)}; build the model in fp32 and call it before casting"
        )
