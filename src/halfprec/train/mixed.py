"""``MixedPrecision``: autocast for forward and loss, a loss-scaled backward, a checked step.

The torch.amp recipe, as a small state machine whose verbs are the steps a user takes::

    mp = MixedPrecision("fp16", device="cpu")
    with mp.autocast():
        loss = loss_fn(model(x), y)
    mp.backward(loss)
    outcome = mp.step(optimizer, clip_grad_norm=1.0, schedulers=[scheduler])

``step`` unscales before it clips, skips the whole step (every optimizer, no scheduler
advance) when any gradient is inf/NaN, keeps the scale between a floor and a ceiling, and
raises :class:`TrainingDivergedError` naming the first inf/NaN gradient after too many
skips in a row instead of letting the scale decay to nothing.

An applied step reads the device once (one host sync): the total gradient norm, whose
being finite decides "apply or skip" for every optimizer and, in fp16, the next loss
scale. The loss scale is kept on the host and written to the scaler, so reading it never
syncs; ``StepOutcome.grad_norm`` is that same number. A skipped step reads which
gradients (and, with ``watch``, which activations) went inf/NaN: one read each.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import warnings
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from halfprec.dtypes import DTypeLike, dtype_name, ensure_runnable, range_of, resolve_dtype
from halfprec.errors import DTypeError
from halfprec.train.config import StepOutcome, StepStatus, TrainConfig, TrainingStateError
from halfprec.train.grads import full_tensor, params_with_grad, total_norm
from halfprec.train.masters import MasterWeights, is_sharded
from halfprec.train.watch import GradientWatch, NonFinite, diverged, unwrap

__all__ = ["MixedPrecision", "ensure_autocast_runs", "needs_loss_scaling"]

STATE_FORMAT = "halfprec.train.MixedPrecision/1"


class _Scheduler(Protocol):
    def step(self) -> Any: ...


def needs_loss_scaling(dtype: torch.dtype) -> bool:
    """True when ``dtype``'s exponent range is narrower than fp32's (fp16), so small
    gradients underflow unless the loss is scaled up; bf16 shares fp32's range."""
    return range_of(dtype).smallest_normal > range_of(torch.float32).smallest_normal


class MixedPrecision:
    """Autocast + loss scaling + checked optimizer steps for one training run.

    ``dtype`` is ``"fp16"``, ``"bf16"`` or ``"auto"`` (resolved for ``device``). fp16 gets a
    ``torch.amp.GradScaler`` for ``device`` (a sharded one that agrees across ranks when
    ``torch.distributed`` is initialised); bf16 needs none. If autocast would not run
    ``dtype`` on ``device``, construction raises :class:`DTypeError` rather than training
    silently in fp32.
    """

    def __init__(
        self,
        dtype: DTypeLike = "auto",
        device: str | torch.device = "cpu",
        config: TrainConfig | None = None,
    ) -> None:
        self.device = torch.device(device)
        choice = resolve_dtype(dtype, self.device)
        self.dtype = choice.dtype
        self.reason = choice.reason
        self.config = config if config is not None else TrainConfig()
        ensure_runnable(self.dtype, self.device)
        ensure_autocast_runs(self.dtype, self.device)
        self._scaler = _make_scaler(self.device, self.config, needs_loss_scaling(self.dtype))
        self._scale = _LossScale(self.config)
        self._watch = GradientWatch()
        self._micro_batches = 0
        self._masters: MasterWeights | None = None
        self.steps_applied = 0
        self.steps_skipped = 0
        self.consecutive_skips = 0
        self._first_bad: NonFinite | None = None
        self._first_activation: str | None = None

    # -- the verbs -------------------------------------------------------------------

    def autocast(self) -> torch.autocast:
        """Context manager for the forward pass and the loss; call backward after it."""
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate ``loss`` scaled by the loss scale (and divided by the micro-batch
        count when accumulating gradients)."""
        if torch.is_autocast_enabled(self.device.type):
            raise TrainingStateError(
                "backward() was called inside autocast(); end the `with mp.autocast():` "
                "block after computing the loss, then call mp.backward(loss)"
            )
        steps = self.config.accumulation_steps
        if self._micro_batches >= steps:
            raise TrainingStateError(
                f"backward() was called {self._micro_batches + 1} times since the last step(), "
                f"but accumulation_steps={steps}; call mp.step(optimizer) after every "
                f"{steps} backward() call(s)"
            )
        if steps > 1:
            loss = loss / steps
        self._scaler.scale(loss).backward()
        if self._masters is not None:
            self._masters.gather_grads()
        self._micro_batches += 1

    def step(
        self,
        *optimizers: torch.optim.Optimizer,
        clip_grad_norm: float | None = None,
        schedulers: Iterable[_Scheduler] = (),
    ) -> StepOutcome:
        """Unscale, check, clip, and step every optimizer together, or skip them all.

        Schedulers advance only on applied steps. Before ``accumulation_steps``
        micro-batches have been backpropagated this returns ``"accumulating"`` and changes
        nothing.
        """
        if not optimizers:
            raise TypeError("step() needs at least one optimizer: mp.step(optimizer)")
        if clip_grad_norm is not None and not clip_grad_norm > 0:
            raise ValueError(f"step(clip_grad_norm={clip_grad_norm!r}): must be > 0 or None")
        scale_before = self.scale
        if self._micro_batches == 0:
            raise TrainingStateError(
                "step() was called with no backward() since the last step; "
                "call mp.backward(loss) first"
            )
        if self._micro_batches < self.config.accumulation_steps:
            return self._outcome("accumulating", scale_before, None, False)
        for optimizer in optimizers:
            self._scaler.unscale_(optimizer)
        params = params_with_grad(optimizers)
        if not params:
            raise TrainingStateError(
                "step() found no gradients on the optimizers' parameters; "
                "did the loss depend on them, and did mp.backward(loss) run?"
            )
        norm = full_tensor(total_norm(params))
        grad_norm = norm.item()  # the step's one host sync
        found_inf = not math.isfinite(grad_norm)
        bad = self._record_skip(optimizers) if found_inf else None
        if not found_inf:
            if clip_grad_norm is not None:  # with the norm tensor: no second sync
                torch.nn.utils.clip_grads_with_norm_(params, clip_grad_norm, norm)
            for optimizer in optimizers:
                optimizer.step()
            if self._masters is not None:
                self._masters.copy_back()
            for scheduler in schedulers:
                scheduler.step()
        if self.scaling:
            self._scale.update(found_inf)
            self._scaler.update(new_scale=self._scale.value)  # a fill on the device, no sync
        self._micro_batches = 0
        self._watch.reset()
        if self.config.zero_grad:
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
        if bad is not None:
            self.steps_skipped += 1
            self.consecutive_skips += 1
            outcome = self._outcome("skipped", scale_before, grad_norm, True)
            self._check_watchdog(bad)
            return outcome
        self.steps_applied += 1
        self.consecutive_skips = 0
        self._first_bad = None
        self._first_activation = None
        return self._outcome("applied", scale_before, grad_norm, False)

    def _record_skip(self, optimizers: Sequence[torch.optim.Optimizer]) -> NonFinite:
        """Which gradients (and activations) went inf/NaN; kept from the first skip of a run."""
        bad = self._watch.find(optimizers)
        if self._first_bad is None:
            self._first_bad = bad
            self._first_activation = self._watch.first_activation()
        return bad

    def use_master_weights(self, model: nn.Module, *optimizers: torch.optim.Optimizer) -> None:
        """Master-weight mode: cast ``model``'s parameters to ``self.dtype`` in place, once,
        and rebind ``optimizers`` to fp32 master copies of them.

        Forward and backward then run on half-precision weights with no per-forward casts
        (keep ``mp.autocast()`` around forward and loss: ops that autocast runs in fp32
        still do); ``backward`` adds the half gradients into fp32 gradients on the masters
        (micro-batches accumulate in fp32), the optimizers update the masters and their
        fp32 state, and an applied step rounds the masters back into the parameters. A
        skipped step changes neither. Call it on the plain fp32 model right after building
        the optimizers and before wrapping the model in DDP; under torch.distributed every
        rank calls it and rank 0's weights are broadcast, as DDP does. A model sharded by
        FSDP2 (``fully_shard`` with :func:`fsdp_policy`) has fp32 masters already: nothing
        changes.
        """
        from torch.nn.parallel import DataParallel, DistributedDataParallel

        if not optimizers:
            raise TypeError("use_master_weights() needs the optimizers: (model, optimizer)")
        if isinstance(model, (DataParallel, DistributedDataParallel)):
            raise TrainingStateError(
                f"use_master_weights() got a {type(model).__name__}; call it on the plain "
                "model before wrapping it, then wrap the model it cast"
            )
        if self._masters is not None:
            raise TrainingStateError("use_master_weights() was already called on this run")
        if self._micro_batches or self.steps_applied or self.steps_skipped:
            raise TrainingStateError(
                "use_master_weights() was called after training began; call it before the "
                "first backward (and load a checkpoint after it)"
            )
        if is_sharded(model):
            return
        masters = MasterWeights(model, optimizers, self.dtype)
        if _distributed():
            for master in masters.masters:
                torch.distributed.broadcast(master.data, src=0)
            masters.copy_back()
        self._masters = masters
        self._watch.alias(masters.alias)

    @property
    def master_weights(self) -> bool:
        """Whether :meth:`use_master_weights` put fp32 masters behind the parameters."""
        return self._masters is not None

    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The model's weights as a checkpoint stores them: in master-weight mode the fp32
        masters (the weights an AMP run saves), otherwise ``state_dict()``."""
        inner = unwrap(model)
        return self._masters.state_dict(inner) if self._masters else inner.state_dict()

    def load_model_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Load :meth:`model_state_dict` output (or an AMP run's weights) into ``model``;
        in master-weight mode into the masters too, rounded into the parameters."""
        inner = unwrap(model)
        inner.load_state_dict(state)
        if self._masters is not None:
            self._masters.load(inner, state)

    def watch(self, *models: nn.Module, activations: bool = True) -> None:
        """Record parameter names (and backward order) so the watchdog can name the
        parameter and module whose gradient went inf/NaN first; with ``activations``, also
        the first module whose output held inf/NaN (one reduction per module output in
        training forwards). :meth:`unwatch` takes the hooks off."""
        for model in models:
            self._watch.add(model, activations=activations)

    def unwatch(self) -> None:
        """Remove the hooks that :meth:`watch` put on the models."""
        self._watch.remove()

    # -- state -----------------------------------------------------------------------

    @property
    def scale(self) -> float:
        """The current loss scale (1.0 when the dtype needs no scaling); no host sync."""
        return self._scale.value if self.scaling else 1.0

    @property
    def scaling(self) -> bool:
        """Whether this run scales the loss (fp16) or not (bf16)."""
        return bool(self._scaler.is_enabled())

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: dtype, config, scaler (with its growth tracker)
        and counters. Call it between steps, not in the middle of accumulation."""
        if self._micro_batches:
            raise TrainingStateError(
                f"state_dict() was called after {self._micro_batches} of "
                f"{self.config.accumulation_steps} accumulated micro-batches; the gradients "
                "are not part of the state, so save right after mp.step()"
            )
        return {
            "format": STATE_FORMAT,
            "dtype": dtype_name(self.dtype),
            "config": dataclasses.asdict(self.config),
            # empty where the loss is not scaled (bf16), as GradScaler's own state is
            "scaler": self._scale.state_dict(self._scaler.state_dict()) if self.scaling else {},
            "counters": {
                "steps_applied": self.steps_applied,
                "steps_skipped": self.steps_skipped,
                "consecutive_skips": self.consecutive_skips,
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; a different dtype or config is an error."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise TrainingStateError(
                f"load_state_dict() got {found!r}, not a MixedPrecision state "
                f"({STATE_FORMAT}); pass the dict that MixedPrecision.state_dict() returned"
            )
        if state["dtype"] != dtype_name(self.dtype):
            raise TrainingStateError(
                f"the saved state is from a {state['dtype']} run, but this MixedPrecision "
                f"is {dtype_name(self.dtype)}; resume with MixedPrecision({state['dtype']!r}, "
                "...), or start a new run without loading the old state"
            )
        mine = dataclasses.asdict(self.config)
        diff = {k: (v, mine.get(k)) for k, v in state["config"].items() if mine.get(k) != v}
        if diff:
            listed = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
            raise TrainingStateError(
                f"the saved TrainConfig differs from this run's ({listed}); resume with "
                "MixedPrecision(..., config=TrainConfig(**saved['config']))"
            )
        if self.scaling:
            self._scaler.load_state_dict(state["scaler"])
            self._scale.load_state_dict(state["scaler"])
        counters = state["counters"]
        self.steps_applied = int(counters["steps_applied"])
        self.steps_skipped = int(counters["steps_skipped"])
        self.consecutive_skips = int(counters["consecutive_skips"])

    # -- internals -------------------------------------------------------------------

    def _outcome(
        self, status: StepStatus, before: float, norm: float | None, found_inf: bool
    ) -> StepOutcome:
        return StepOutcome(status, before, self.scale, norm, found_inf, self.steps_applied)

    def _check_watchdog(self, bad: NonFinite) -> None:
        limit = self.config.max_consecutive_skips
        if limit is None or self.consecutive_skips < limit:
            return
        first = self._first_bad or bad
        hint = "" if self._watch.watching else " (call mp.watch(model) to get parameter names)"
        scale = self.scale if self.scaling else None
        raise diverged(
            self.consecutive_skips, scale, first, self._first_activation, self.dtype, hint
        )


class _LossScale:
    """The fp16 loss scale, kept on the host so that reading it never syncs: GradScaler's
    update rule (back off after inf/NaN; grow after ``growth_interval`` applied steps in a
    row, if the grown scale is finite in fp32), then bounded by ``min_scale`` and
    ``max_scale``. The scaler's own tensor is filled from :attr:`value` after each step."""

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.value = _fp32(config.init_scale)
        self.tracker = 0  # applied steps in a row since the last change

    def update(self, found_inf: bool) -> None:
        config = self.config
        scale = self.value
        if found_inf:
            scale, self.tracker = _fp32(scale * config.backoff_factor), 0
        elif self.tracker + 1 == config.growth_interval:
            grown = _fp32(scale * config.growth_factor)
            scale, self.tracker = (grown if math.isfinite(grown) else scale), 0
        else:
            self.tracker += 1
        self.value = min(max(scale, config.min_scale), config.max_scale)

    def state_dict(self, scaler_state: dict[str, Any]) -> dict[str, Any]:
        """GradScaler's state dict, with this scale and growth tracker."""
        return {**scaler_state, "scale": self.value, "_growth_tracker": self.tracker}

    def load_state_dict(self, scaler_state: dict[str, Any]) -> None:
        self.value = float(scaler_state["scale"])
        self.tracker = int(scaler_state["_growth_tracker"])


def _fp32(value: float) -> float:
    """``value`` rounded to fp32, as the scaler's tensor holds it (inf past fp32's range)."""
    if not abs(value) < 3.4028235677973366e38:
        return math.copysign(math.inf, value) if not math.isnan(value) else value
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _make_scaler(device: torch.device, config: TrainConfig, enabled: bool) -> Any:
    kwargs: dict[str, Any] = {
        "init_scale": config.init_scale,
        "growth_factor": config.growth_factor,
        "backoff_factor": config.backoff_factor,
        "growth_interval": config.growth_interval,
        "enabled": enabled,
    }
    if enabled and _distributed():
        # All-reduces found-inf, so sharded gradients (FSDP2) skip and back off on all ranks.
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device.type, **kwargs)
    return torch.amp.GradScaler(device.type, **kwargs)


def _distributed() -> bool:
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def ensure_autocast_runs(dtype: torch.dtype, device: torch.device) -> None:
    """Autocast disables itself (with only a warning) for a dtype it cannot run; refuse."""
    probe = torch.ones(2, 2, device=device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast(device.type, dtype=dtype):
            got = torch.nn.functional.linear(probe, probe).dtype
    if got != dtype:
        said = f" (torch: {' '.join(str(caught[0].message).split())})" if caught else ""
        raise DTypeError(
            f"autocast on {device.type} does not compute in {dtype_name(dtype)} "
            f"(a linear layer ran in {dtype_name(got)}){said}; training would silently run "
            "in fp32. Use dtype='bf16' or 'auto', or a torch build with this autocast dtype"
        )
