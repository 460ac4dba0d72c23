"""OpenVINO's usage telemetry sends nothing for halfprec's own conversions (a counter stands
in for the network send; the conversion is OpenVINO's real one)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from halfprec.runtimes import build_runtime
from halfprec.runtimes.ov_telemetry import no_telemetry

ov = pytest.importorskip("openvino")
sender = pytest.importorskip("openvino_telemetry.utils.sender")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The messages OpenVINO's telemetry would send (none leaves the process)."""
    messages: list[Any] = []

    def send(self: Any, backend: Any, message: Any) -> None:
        messages.append(message)

    monkeypatch.setattr(sender.TelemetrySender, "send", send)
    return messages


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::torch.jit.TracerWarning")
def test_a_conversion_of_halfprecs_sends_nothing_and_the_sender_comes_back(
    sent: list[Any],
) -> None:
    x = torch.randn(2, 16)
    ov.convert_model(_model(), example_input=(x,))  # the user's own call: as OpenVINO decides
    if not sent:
        pytest.skip("OpenVINO's telemetry is off here (opt_in_out --opt_out, or a CI variable)")
    before = len(sent)
    module = build_runtime(_model(), "openvino", torch.float32, x)
    assert len(sent) == before  # each event of a conversion forked a process: none now
    assert torch.allclose(module(x), _model()(x), atol=1e-5)
    ov.convert_model(_model(), example_input=(x,))
    assert len(sent) > before  # the user's next conversion reports again


def test_the_sender_comes_back_after_nested_blocks_and_an_error(sent: list[Any]) -> None:
    own = sender.TelemetrySender.send
    with pytest.raises(RuntimeError), no_telemetry():
        with no_telemetry():
            assert sender.TelemetrySender.send is not own
        assert sender.TelemetrySender.send is not own  # the outer block still holds it back
        raise RuntimeError("conversion failed")
    assert sender.TelemetrySender.send is own
    sender.TelemetrySender().send(None, {"event": 1})
    assert sent == [{"event": 1}]
