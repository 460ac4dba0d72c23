"""OpProbe: each of a module's own ops computed in half and again in fp32, its reference."""

from __future__ import annotations

import torch
from torch import nn

from halfprec.convert.op_islands import OpRef
from halfprec.diagnose.ops import OpDiagnosis, OpProbe
from support.precision import SEEN, callers_fp32, spy
from support.tuned import HostSyncs


class _Spying(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return spy(x) * 2


def test_each_ops_reference_is_ieee_fp32_under_the_callers_reduced_precision() -> None:
    """The probe's fp32 recomputation of an op runs in IEEE fp32 wherever the probe is used
    (not only inside diagnose's reference pass), while the half op itself runs under the
    caller's settings, which hold again afterwards."""
    SEEN.clear()
    found: dict[OpRef, OpDiagnosis] = {}
    module = _Spying()
    with callers_fp32(mkldnn_matmul="bf16", cuda_matmul="tf32"):
        with torch.no_grad(), OpProbe(module, "m", torch.bfloat16, found):
            module(torch.randn(4, 8).to(torch.bfloat16))
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    assert [s[0] for s in SEEN] == [torch.float32, torch.bfloat16], SEEN
    assert SEEN[0][1:] == ("ieee", "ieee")  # the reference
    assert SEEN[1][1:] == ("bf16", "tf32")  # the half op: as the caller runs it
    assert [ref.op for ref in found] and all(rec.calls == 1 for rec in found.values())


class _FourOps(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.exp(x)) * 2 + torch.sin(x)


def test_each_probed_op_reads_the_device_once() -> None:
    """The sync budget of diagnose per op: one read per probed op's output (its error
    sums, counts and flushed values in one transfer), not one per statistic."""
    found: dict[OpRef, OpDiagnosis] = {}
    module = _FourOps()
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    with torch.no_grad(), HostSyncs() as syncs, OpProbe(module, "m", torch.bfloat16, found):
        module(x)
    assert len(found) == 5  # exp, tanh, mul, sin, add
    assert syncs.count == len(found)
    assert all(rec.stats.compared == 64 and rec.flushed == 0 for rec in found.values())
