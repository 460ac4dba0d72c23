"""Checks a decoded training checkpoint completely, before any state is touched.

:func:`~halfprec.train.checkpoint.load_checkpoint` calls :func:`check_parts` first; only
when every part fits the objects it will be loaded into (names, shapes, dtypes, group
sizes, value ranges) does it load anything, so a forged or mismatched file never leaves
a half-loaded model or optimizer behind.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any, TypeGuard

import torch
from torch import nn

from halfprec.dtypes import dtype_kind, dtype_name, fits_in
from halfprec.errors import CheckpointError


def check_parts(
    path: object,
    parts: Mapping[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    counters: object,
    *,
    loss_scaling: bool = False,
) -> None:
    """Raise :class:`CheckpointError` naming the first part that does not fit.
    ``loss_scaling``: the run resuming scales its loss (fp16), so the saved scaler state
    must be there."""
    where = f"{path}:"
    _check_model(where, parts.get("model"), model)
    _check_optimizer(where, parts.get("optimizer"), optimizer)
    _check_rng(where, parts.get("rng"))
    if "mixed_precision" in parts:
        _check_mixed_precision(where, parts["mixed_precision"], loss_scaling)
    if "scheduler" in parts and not _str_dict(parts["scheduler"]):
        raise _bad(where, "the scheduler state is not a dict of named values")
    if not _str_dict(counters) or not all(
        isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in counters.values()
    ):
        raise _bad(where, "the counters are not a dict of numbers and strings")


def _bad(where: str, why: str) -> CheckpointError:
    return CheckpointError(
        f"{where} {why}; the file is damaged or was not written by "
        "halfprec.train.save_checkpoint, so nothing was loaded"
    )


def _str_dict(obj: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(obj, dict) and all(isinstance(k, str) for k in obj)


def _check_model(where: str, state: object, model: nn.Module) -> None:
    if not _str_dict(state) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise _bad(where, "the model state is not a dict of tensors")
    from halfprec.train.watch import unwrap

    expected = unwrap(model).state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [
        f"{k} {list(state[k].shape)} vs model {list(t.shape)}"
        for k, t in expected.items()
        if k in state
        and (state[k].shape != t.shape or dtype_kind(state[k].dtype) != dtype_kind(t.dtype))
    ]
    # a weight saved in another floating dtype is cast on load: it must fit (fits_in)
    overflow = [
        f"{k} ({dtype_name(state[k].dtype)} values past {dtype_name(t.dtype)}'s range)"
        for k, t in expected.items()
        if k in state
        and state[k].shape == t.shape
        and state[k].dtype != t.dtype
        and t.is_floating_point()
        and state[k].is_floating_point()
        and not fits_in(state[k], t.dtype)
    ]
    labelled = (("missing", missing), ("unexpected", unexpected), ("shape", wrong))
    problems = [
        f"{label} {', '.join(names[:3])}" + (" ..." if len(names) > 3 else "")
        for label, names in (*labelled, ("out of range", overflow))
        if names
    ]
    if problems:
        raise CheckpointError(
            f"{where} the saved weights do not fit this model ({'; '.join(problems)}); "
            "build the model with the same architecture before loading"
        )


def _check_optimizer(where: str, state: object, optimizer: torch.optim.Optimizer) -> None:
    if not _str_dict(state) or not isinstance(state.get("state"), dict):
        raise _bad(where, "the optimizer state has no 'state' table")
    groups = state.get("param_groups")
    mine = optimizer.state_dict()["param_groups"]
    if not isinstance(groups, list) or not all(_str_dict(g) for g in groups):
        raise _bad(where, "the optimizer state has no list of parameter groups")
    sizes = [len(g.get("params", ())) if isinstance(g.get("params"), list) else -1 for g in groups]
    if sizes != [len(g["params"]) for g in mine]:
        raise CheckpointError(
            f"{where} the saved optimizer state does not fit this optimizer (groups of sizes "
            f"{sizes}, this one "
            f"{[len(g['params']) for g in mine]}); build the optimizer over the same "
            "parameters and groups before loading"
        )
    for saved, own in zip(groups, mine, strict=True):
        if set(saved) != set(own):
            raise _bad(where, f"an optimizer group has settings {sorted(saved)}")
        if not all(isinstance(i, int) for i in saved["params"]):
            raise _bad(where, "an optimizer group lists parameters that are not indices")
    shapes = {
        pid: p.shape
        for saved, own in zip(groups, optimizer.param_groups, strict=True)
        for pid, p in zip(saved["params"], own["params"], strict=True)
    }
    for pid, entry in state["state"].items():
        if pid not in shapes or not _str_dict(entry):
            raise _bad(where, f"the optimizer state names parameter {pid!r}, not in any group")
        for name, value in entry.items():
            if not isinstance(value, torch.Tensor):
                continue
            # a moment is the parameter's shape, 0-dim too (it would broadcast); other
            # entries (step, NAdam's mu_product) may be scalars
            if (name in _MOMENTS or value.dim() > 0) and value.shape != shapes[pid]:
                raise _bad(
                    where,
                    f"optimizer state {name!r} of parameter {pid} has shape "
                    f"{list(value.shape)}, not the parameter's {list(shapes[pid])}",
                )


def _check_rng(where: str, state: object) -> None:
    if not _str_dict(state):
        raise _bad(where, "the RNG state is missing")
    python = state.get("python")
    ok = (
        isinstance(python, (list, tuple))
        and len(python) == 3
        and isinstance(python[0], int)
        and isinstance(python[1], (list, tuple))
        and len(python[1]) == 625
        and all(isinstance(i, int) and 0 <= i < 2**32 for i in python[1])
        and (python[2] is None or isinstance(python[2], float))
    )
    if not ok:
        raise _bad(where, "the Python RNG state is malformed")
    torch_state = state.get("torch")
    want = torch.get_rng_state()
    if not (
        isinstance(torch_state, torch.Tensor)
        and torch_state.dtype == want.dtype
        and torch_state.shape == want.shape
    ):
        raise _bad(where, "the torch RNG state is malformed")
    _restores(where, state)


def _restores(where: str, state: dict[str, Any]) -> None:
    """Restore each RNG state on a scratch generator, so that a state the real generator
    would refuse (a zeroed mt19937, an index out of range) is refused before anything is
    loaded, not after the model and optimizer were overwritten."""
    version, internal, gauss = state["python"]
    try:
        random.Random().setstate((version, tuple(internal), gauss))
    except (ValueError, TypeError) as exc:
        raise _bad(where, f"the Python RNG state is refused by random ({exc})") from None
    try:
        torch.Generator().set_state(state["torch"])
    except RuntimeError as exc:
        raise _bad(where, f"the torch RNG state is refused by torch ({exc})") from None
    saved = state.get("accelerator")
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if saved is None or accelerator is None:
        return
    states = saved.get("states") if isinstance(saved, dict) else None
    if saved.get("type") != accelerator.type:
        return  # saved on another kind of device: load_checkpoint leaves it alone
    count = torch.get_device_module(accelerator).device_count()
    if not (
        isinstance(states, list)
        and all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in states)
    ):
        raise _bad(where, f"the {accelerator.type} RNG states are malformed")
    for index, t in enumerate(states[:count]):  # the devices this machine has
        try:
            torch.Generator(device=torch.device(accelerator.type, index)).set_state(t)
        except RuntimeError as exc:
            raise _bad(where, f"the {accelerator.type} RNG state is refused ({exc})") from None


# optimizer state that torch's optimizers keep in the parameter's shape
_MOMENTS = frozenset(
    {
        *("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "sum", "square_avg"),
        *("grad_avg", "acc_delta", "ax", "prev", "step_size", "exp_inf"),
    }
)


def _check_mixed_precision(where: str, state: object, loss_scaling: bool) -> None:
    if not _str_dict(state) or not _str_dict(state.get("scaler")):
        raise _bad(where, "the mixed precision state has no scaler")
    if not isinstance(state.get("dtype"), str):
        raise _bad(where, "the mixed precision state has no dtype")
    if not _str_dict(state.get("config")):
        raise _bad(where, "the mixed precision state has no config of named settings")
    scaler, counters = state["scaler"], state.get("counters")
    if loss_scaling and not scaler:
        raise _bad(where, "the loss scaler state is empty, but this run scales its loss (fp16)")
    if scaler:  # empty when loss scaling is off (bf16)
        checks = {
            "scale": lambda v: _finite(v) and v > 0,
            "growth_factor": lambda v: _finite(v) and v > 1,
            "backoff_factor": lambda v: _finite(v) and 0 < v < 1,
            "growth_interval": lambda v: isinstance(v, int) and v > 0,
            "_growth_tracker": lambda v: isinstance(v, int) and v >= 0,
        }
        for key, check in checks.items():
            if not check(scaler.get(key)):
                raise _bad(where, f"the loss scaler's {key} is {scaler.get(key)!r}")
    names = ("steps_applied", "steps_skipped", "consecutive_skips")
    if not _str_dict(counters) or not all(
        isinstance(counters.get(n), int) and counters[n] >= 0 for n in names
    ):
        raise _bad(where, "the mixed precision step counters are malformed")


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
