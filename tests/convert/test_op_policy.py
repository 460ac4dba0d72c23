"""The default op policy's mode: fp32-list ops in fp32, GEMMs in half, every other call
passed through untouched, and nothing left behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

import halfprec
from halfprec.convert.op_policy import DEFAULT_FP32_OPS, Fp32OpsMode

BF16 = torch.bfloat16
POLICY = frozenset(DEFAULT_FP32_OPS)


def _under_policy(fn: Callable[[], Any], ops: frozenset[str] = POLICY) -> Any:
    with Fp32OpsMode(BF16, ops):
        return fn()


@pytest.fixture
def h() -> torch.Tensor:
    return (torch.rand(3, 4) + 0.5).to(BF16)


@pytest.mark.parametrize(
    "op",
    [
        lambda h: torch.exp(h),
        lambda h: h.exp(),
        lambda h: h.softmax(-1),
        lambda h: F.softmax(h, dim=-1),  # dim as a keyword
        lambda h: torch.sum(input=h, dim=(0, 1)),  # every operand a keyword, a dim tuple
        lambda h: h.sum(dim=[0]),
        lambda h: h.cumsum(0),
        lambda h: 2.0**h,  # Tensor.__rpow__
        lambda h: torch.logsumexp(h, dim=1),
        lambda h: h.var(dim=0),
        lambda h: torch.linalg.vector_norm(h, dim=1),
        lambda h: torch.cdist(h, h),
    ],
)
def test_an_fp32_op_with_a_half_operand_computes_in_fp32(
    h: torch.Tensor, op: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    out = _under_policy(lambda: op(h))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, op(h.float()))


def test_ops_outside_the_list_and_all_fp32_operands_are_left_alone(h: torch.Tensor) -> None:
    assert _under_policy(lambda: h.tanh()).dtype == BF16
    assert _under_policy(lambda: h.exp(), frozenset()).dtype == BF16  # policy off
    x = h.float()
    assert _under_policy(lambda: x.exp()).dtype == torch.float32
    shape = _under_policy(lambda: (h.shape, h.view(-1).size(0), h.dim()))
    assert shape == (torch.Size([3, 4]), 12, 2)


@pytest.mark.parametrize(
    "gemm",
    [
        lambda x, w: F.linear(x, w),
        lambda x, w: x @ w.T,
        lambda x, w: torch.matmul(x, w.T),
        lambda x, w: torch.einsum("ij,kj->ik", x, w),
        lambda x, w: torch.einsum("ij,kj->ik", [x, w]),  # operands in a list
        lambda x, w: torch.linalg.multi_dot([x, w.T]),
    ],
)
def test_a_gemm_mixing_fp32_and_half_runs_in_half(
    h: torch.Tensor, gemm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> None:
    x, w = h.float().exp(), h  # an fp32 result of the policy meets a half weight
    for ops in (POLICY, frozenset()):  # also with the list off (fp32 inputs still need it)
        out = _under_policy(lambda: gemm(x, w), ops)
        assert out.dtype == BF16
        torch.testing.assert_close(out, gemm(x.to(BF16), w))


def test_a_gemm_on_fp32_operands_only_stays_fp32(h: torch.Tensor) -> None:
    """As inside an fp32 island: unlike torch.autocast, which computes it in half."""
    x = h.float()
    assert _under_policy(lambda: F.linear(x, x)).dtype == torch.float32
    with torch.autocast("cpu", dtype=BF16):
        assert F.linear(x, x).dtype == BF16


def test_cpu_autocast_leaves_much_of_the_list_in_half(h: torch.Tensor) -> None:
    """Why the policy is a mode of its own rather than native autocast: on CPU, autocast
    (torch 2.13) computes these ops of a half tensor in half."""
    ops = [
        h.exp,
        h.log,
        lambda: h.pow(2),
        lambda: h.softmax(-1),
        h.sum,
        lambda: h.cumsum(0),
        h.norm,
    ]
    with torch.autocast("cpu", dtype=BF16):
        assert {f().dtype for f in ops} == {BF16}
    assert {_under_policy(f).dtype for f in ops} == {torch.float32}


class _Record(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def test_a_mode_outside_sees_each_call_once_and_none_of_the_casts(h: torch.Tensor) -> None:
    x = h.float()
    with _Record() as outer:
        _under_policy(lambda: (h.exp(), F.linear(x, h), h.tanh()))
    assert outer.names == ["exp", "linear", "tanh"]


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).softmax(-1).sum(-1)


def test_a_converted_model_applies_the_policy_and_leaves_no_mode_behind() -> None:
    torch.manual_seed(0)
    model = _Block()
    x = torch.randn(4, 8)
    half = halfprec.convert(model, "bf16")
    before = torch._C._len_torch_function_stack()
    seen: list[torch.dtype] = []
    handle = half.proj.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    with torch.inference_mode():
        out = half(x)
    handle.remove()
    assert seen == [BF16] and out.dtype == torch.float32
    assert torch._C._len_torch_function_stack() == before
    # the softmax and the sum ran in fp32 on the bf16 projection
    with torch.inference_mode():
        expected = half.proj(x.to(BF16)).float().softmax(-1).sum(-1)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_attention_fed_an_fp32_mask_by_the_policy_runs_in_half() -> None:
    """``F.multi_head_attention_forward`` is Python: the GEMMs inside it are out of the
    mode's sight, so it is a GEMM of the policy's own (WavLM's position bias, computed from
    a ``log``, reached it in fp32 and crashed its ``baddbmm``)."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(8, 2).to(BF16).eval()
    x = torch.randn(5, 1, 8, dtype=BF16)
    bias = torch.rand(5, 5) + 0.5
    with torch.inference_mode():
        out, weights = _under_policy(lambda: attention(x, x, x, attn_mask=bias.log()))
        expected, _ = attention(x, x, x, attn_mask=bias.log().to(BF16))
    assert out.dtype == BF16
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


class _TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x).relu())


def test_the_guards_checks_are_no_calls_under_the_policys_mode() -> None:
    """Every torch call under the mode costs a Python call: the half modules' guards read
    their inputs' dtypes with torch functions off, so a mode outside sees the model's own
    calls and the casts (the fp32 input cast by ``a``'s guard, the output cast back) only."""
    half, x = halfprec.convert(_TwoLayers(), "bf16"), torch.randn(2, 8)
    with torch.inference_mode(), _Record() as outer:
        half(x)
    assert outer.names == ["to", "linear", "relu", "linear", "__get__", "to"]
