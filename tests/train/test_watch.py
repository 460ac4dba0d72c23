"""GradientWatch: the first inf/NaN activation and gradient, from replica threads, cheaply."""

from __future__ import annotations

import math
import threading
from collections import Counter

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from halfprec.train.watch import GradientWatch


class _Ops(TorchDispatchMode):
    """Counts the aten ops run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def _chain(width: int = 8, depth: int = 6) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Linear(width, width) for _ in range(depth))).train()


def test_activation_watch_costs_one_reduction_per_module_output() -> None:
    model, x = _chain(), torch.randn(4, 8)
    with _Ops() as plain:
        model(x)
    watch = GradientWatch()
    watch.add(model, activations=True)
    with _Ops() as watched:
        model(x)
    extra = watched.ops - plain.ops
    modules = len(list(model.modules()))  # the 6 layers and the Sequential itself
    assert sum(extra.values()) == modules, extra
    assert set(extra) == {"aten.aminmax.default"}
    watch.remove()
    with _Ops() as removed:
        model(x)
    assert removed.ops == plain.ops


def test_first_activation_sees_inf_nan_in_any_output_and_not_large_finite_values() -> None:
    class Pair(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, x * 2

    model = nn.Sequential(nn.Identity(), Pair()).train()
    watch = GradientWatch()
    watch.add(model, activations=True)
    big = torch.full((4,), 3e4, dtype=torch.float16)  # finite, and so is x * 2; the sum is not
    model(big)
    assert watch.first_activation() is None
    for bad in (math.inf, -math.inf, math.nan):
        watch.reset()
        model(torch.tensor([1.0, bad]))
        assert watch.first_activation() == "0 (Identity)"
    watch.reset()
    model(big + 1e4)  # the second output, x * 2, overflows fp16
    assert watch.first_activation() == "1 (Pair)"


_HUNG_S = 600  # a replica thread alive this long is stuck (a deadlock), not slow
# how long the finite replica holds its combine open for the inf replica; when it runs out
# (only on a machine stalled that long) the interleaving is not staged and the test passes
_STAGE_S = 30


class _Replica(torch.Tensor):
    """A replica's output. When a replica thread combines flags on one shared record
    (``seen | bad``), the finite replica's combine, having read the record, waits until the
    other replica's forward has finished, so it writes last: the interleaving that loses an
    update. The events are set per test by :func:`_staged`."""

    reading: threading.Event
    inf_done: threading.Event

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        combine = func in (torch.Tensor.__or__, torch.Tensor.bitwise_or)
        if combine and threading.current_thread().name == "finite replica":
            cls.reading.set()
            # bounded: a combine under a lock (which loses nothing) would keep the inf
            # replica out until this wait ends
            cls.inf_done.wait(timeout=_STAGE_S)
        return super().__torch_function__(func, types, args, kwargs or {})


def _finished(thread: threading.Thread) -> None:
    thread.join(timeout=_HUNG_S)
    assert not thread.is_alive(), f"{thread.name} did not finish: a deadlock"


def test_replica_threads_record_their_activations_without_losing_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nn.DataParallel runs each replica's forward in its own thread at the same time:
    an inf in one replica must reach the record whatever the other replica does."""

    class Emit(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 1

    model = nn.Sequential(Emit()).train()
    watch = GradientWatch()
    watch.add(model[0], activations=True)
    model(torch.ones(3).as_subclass(_Replica))  # an earlier micro-batch, all finite
    monkeypatch.setattr(_Replica, "reading", threading.Event(), raising=False)
    monkeypatch.setattr(_Replica, "inf_done", threading.Event(), raising=False)
    errors: list[BaseException] = []

    def replica(values: list[float], done: threading.Event) -> None:
        try:
            model(torch.tensor(values).as_subclass(_Replica))
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)
        finally:
            done.set()

    finite = threading.Thread(
        target=replica, args=([1.0, 2.0], _Replica.reading), name="finite replica"
    )
    finite.start()
    _Replica.reading.wait()  # it has read the record, or finished without combining
    inf = threading.Thread(target=replica, args=([1.0, math.inf], _Replica.inf_done))
    inf.start()
    for thread in (finite, inf):
        _finished(thread)
    assert not errors
    assert watch.first_activation() == "the model (Emit)"


def test_gradient_order_from_several_threads_names_each_parameter_once() -> None:
    """Backward hooks may run in autograd's device threads; the order stays a ranking."""
    model = _chain(depth=4)
    watch = GradientWatch()
    watch.add(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def backward(seed: int) -> None:
        x = torch.randn(2, 8, generator=torch.Generator().manual_seed(seed))
        model(x).sum().backward()

    threads = [threading.Thread(target=backward, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        _finished(thread)
    for p in model.parameters():
        assert p.grad is not None
        p.grad.view(-1)[0] = math.nan
    found = watch.find([optimizer])
    assert found.total == 8 and len(set(found.names)) == 8
    # backward order: the last layer's gradients arrived first
    assert found.names[0].startswith("3.")
    assert found.names[-1].startswith("0.")


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason="real DataParallel replicas on two devices need two GPUs",
)
def test_dataparallel_replicas_on_two_gpus_report_the_inf_replica() -> None:
    model = _chain().cuda()
    watch = GradientWatch()
    watch.add(model, activations=True)
    x = torch.randn(4, 8, device="cuda")
    x[3, 0] = math.inf  # only the second replica's half of the batch
    nn.DataParallel(model, device_ids=[0, 1])(x)
    assert watch.first_activation() == "0 (Linear)"
