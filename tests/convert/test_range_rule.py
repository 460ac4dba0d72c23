"""The one range rule (:func:`halfprec.dtypes.fits_in`) as the converted model applies it,
and the host syncs a tuned forward makes.

Where a range check of a converted model reads a value, it asks ``fits_in``: an fp32
island that widens, op islands' carried values, and parameters beyond the half range all
decide alike, inf and NaN included. Reading a value is a device-to-host sync; a tuned
forward makes none on a device other than the CPU or while a CUDA graph is captured
(``aten._local_scalar_dense`` is the one op every ``.item()``, ``bool()`` and ``float()``
of a tensor ends in, counted here without CUDA)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn

from halfprec import Recipe, convert
from halfprec.convert import conversion_report
from halfprec.convert.op_islands import fits
from halfprec.dtypes import fits_in
from support.tuned import HostSyncs, tuned_toy

INF, NAN = float("inf"), float("nan")
EDGES = [
    65504.0,  # fp16's max
    float(torch.nextafter(torch.tensor(65520.0), torch.tensor(0.0))),  # rounds down to max
    65520.0,  # the overflow bound: the cast gives inf
    1e5,
    INF,
    -INF,
    NAN,
]


class Emits(nn.Module):
    """Returns a fixed fp32 value in place of its input."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = nn.Parameter(torch.tensor([value]), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.value + 0 * x[..., :1].sum()


class Calls(nn.Module):
    def __init__(self, island: nn.Module) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.island = island

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.island(self.proj(x))
        self.got = out.dtype
        return out


@pytest.mark.parametrize("value", EDGES)
def test_every_range_check_follows_the_one_rule(value: float) -> None:
    rule = fits_in(torch.tensor([value]), torch.float16)
    assert fits(torch.tensor([value]), torch.float16) == rule  # op islands' carried values
    # an fp32 island that widens keeps fp32 exactly what the caller's dtype cannot hold
    half = convert(Calls(Emits(value)), Recipe(dtype="fp16", keep_fp32=("island",)))
    with torch.inference_mode():
        half(torch.randn(2, 4))
    assert half.got == (torch.float16 if rule else torch.float32)
    # a parameter beyond the range makes its module an fp32 island
    report = conversion_report(convert(Calls(Emits(value)), "fp16"))
    assert report is not None
    assert ("island" in report.islands) == (not rule), report.islands


def _count(model: nn.Module, x: torch.Tensor) -> tuple[int, torch.Tensor]:
    # no_grad, not inference_mode: under inference_mode a dispatch mode does not see
    # _local_scalar_dense
    with torch.no_grad(), HostSyncs() as syncs:
        out = model(x)
    return syncs.count, out


def test_eager_on_the_cpu_still_reads_its_range_checks() -> None:
    """The control: on the CPU a read is no device sync, and the checks run as before."""
    syncs, _ = _count(tuned_toy(), torch.randn(3, 4))
    assert syncs > 0


def test_a_tuned_forward_on_another_device_makes_no_host_sync() -> None:
    """A meta tensor stands for an asynchronous device: it has no values to read, so any
    range check that reads one raises, as a sync would stall a GPU on every forward."""
    model = tuned_toy().to("meta")
    syncs, out = _count(model, torch.randn(3, 4, device="meta"))
    assert syncs == 0
    assert out.shape == (3, 4) and out.device.type == "meta"


@pytest.fixture
def capturing(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], bool]]:
    """As inside ``torch.cuda.graph()``: CUDA initialised, the current stream capturing."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    yield torch.cuda.is_current_stream_capturing


@pytest.mark.usefixtures("capturing")
def test_a_captured_forward_makes_no_host_sync_and_keeps_values_wide() -> None:
    """Under capture the checks take a compiled graph's answer: carried fp32 stays fp32
    (never narrower than eager), an island's output goes back to the caller's dtype."""
    model = tuned_toy()
    x = torch.randn(3, 4)
    syncs, out = _count(model, x)
    assert syncs == 0
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
