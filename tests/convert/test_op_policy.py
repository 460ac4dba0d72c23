"""The default op policy's mode: fp32-list ops in fp32, GEMMs in half, every other call
passed through untouched, and nothing left behind."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounter
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

import halfprec
from halfprec.convert import op_policy
from halfprec.convert.op_policy import DEFAULT_FP32_OPS, LEAF_CALLS, Fp32OpsMode

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
        lambda x, w: torch.bmm(x[None], w.T[None])[0],
        lambda x, w: torch.addmm(w[:, :3], x, w.T),
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


def _leaf_and_input(kind: type[nn.Module]) -> tuple[nn.Module, torch.Tensor]:
    x = torch.randn(2, 4, 6, 6)
    made: dict[type[nn.Module], tuple[nn.Module, torch.Tensor]] = {
        nn.Linear: (nn.Linear(6, 3), x),
        nn.Conv1d: (nn.Conv1d(4, 2, 3, padding=1, padding_mode="reflect"), x[:, :, 0]),
        nn.Conv2d: (nn.Conv2d(4, 2, 3, padding=1, padding_mode="circular"), x),
        nn.Conv3d: (nn.Conv3d(2, 2, 1), x),
        nn.Embedding: (nn.Embedding(10, 3), torch.tensor([[1, 2]])),
        nn.LayerNorm: (nn.LayerNorm(6), x),
        nn.GroupNorm: (nn.GroupNorm(2, 4), x),
    }
    return made[kind] if kind in made else (kind(), x)


@pytest.mark.parametrize("kind", list(LEAF_CALLS), ids=lambda k: k.__name__)
def test_each_leaf_makes_no_torch_calls_but_those_listed_for_it(kind: type[nn.Module]) -> None:
    """The policy's mode is set aside for these modules on the strength of this table."""
    leaf, x = _leaf_and_input(kind)
    with torch.inference_mode(), _Record() as seen:
        leaf.train()(x)
        leaf.eval()(x)
    assert seen.names and set(seen.names) <= LEAF_CALLS[kind]


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.proj = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.norm(self.drop(self.proj(self.emb(ids)))).softmax(-1).sum(-1)


def _handled(model: nn.Module, *args: Any) -> tuple[Any, list[str]]:
    """The output of ``model(*args)`` and the names of the calls the policy's mode itself
    handled (its ``__torch_function__`` frames, seen by a profile function)."""
    names: list[str] = []
    code = Fp32OpsMode.__torch_function__.__code__

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code:
            names.append(getattr(frame.f_locals["func"], "__name__", "?"))

    sys.setprofile(profile)
    try:
        out = model(*args)
    finally:
        sys.setprofile(None)
    return out, names


def test_built_in_leaves_run_with_the_policys_mode_set_aside() -> None:
    """Each call the mode passes on costs a Python call: the embedding, linear, dropout and
    norm modules make only such calls, so the mode handles the model's own calls alone,
    while a mode outside it still sees every call, and the values are the policy's."""
    torch.manual_seed(0)
    half, ids = halfprec.convert(_Encoder().eval(), "bf16"), torch.tensor([[1, 5, 7]])
    with torch.inference_mode(), _Record() as outer:
        out, handled = _handled(half, ids)
    assert handled == ["softmax", "sum"]
    # (the root reads the fp32 output's dtype: nothing to cast back)
    assert outer.names == [
        "embedding",
        "linear",
        "dropout",
        "layer_norm",
        "softmax",
        "sum",
        "__get__",
    ]
    assert torch._C._len_torch_function_stack() == 0
    with torch.inference_mode():
        states = half.norm(half.proj(half.emb(ids)))
    assert states.dtype == BF16
    torch.testing.assert_close(out, states.float().softmax(-1).sum(-1), rtol=0, atol=0)


def _output_dtype(model: nn.Module, leaf: nn.Module, *args: Any) -> torch.dtype:
    seen: list[torch.dtype] = []
    handle = leaf.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    with torch.inference_mode():
        model(*args)
    handle.remove()
    return seen[0]


def test_a_leaf_whose_call_the_policy_changes_keeps_the_mode() -> None:
    torch.manual_seed(0)
    model, ids = _Encoder().eval(), torch.tensor([[1, 5, 7]])
    # its op on the fp32 list: computed in fp32, as without the shortcut
    wide = halfprec.convert(model, halfprec.Recipe("bf16", fp32_ops=(*POLICY, "linear")))
    assert _output_dtype(wide, wide.proj, ids) == torch.float32
    norm = halfprec.convert(model, halfprec.Recipe("bf16", fp32_ops=(*POLICY, "layer_norm")))
    assert _output_dtype(norm, norm.norm, ids) == torch.float32
    # a GEMM whose operands no longer share one dtype: the mode casts the fp32 weight
    mixed = halfprec.convert(model, "bf16")
    mixed.proj.weight.data = mixed.proj.weight.data.float()
    assert _output_dtype(mixed, mixed.proj, ids) == BF16


class _KeywordInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(input=x.exp().sum(-1, keepdim=True).expand(-1, 8))


def test_a_keyword_operand_the_guard_leaves_fp32_is_cast_by_the_mode() -> None:
    half, x = halfprec.convert(_KeywordInput(), "bf16"), torch.randn(2, 8)
    assert _output_dtype(half, half.proj, x) == BF16


def test_the_mode_is_back_after_a_leaf_raises() -> None:
    half = halfprec.convert(_Encoder().eval(), "bf16")
    with Fp32OpsMode(BF16, POLICY) as mode, torch.inference_mode():
        with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
            half.proj(torch.randn(2, 5, dtype=BF16))
        assert torch._C._len_torch_function_stack() == 1
        assert torch._C._get_function_stack_at(0) is mode
        assert torch.ones(2, dtype=BF16).sum().dtype == torch.float32  # still applied


def test_each_list_decides_for_itself_which_functions_it_computes_in_fp32(
    h: torch.Tensor,
) -> None:
    """The mode remembers, per fp32 list, which functions it looks at: one list's answer
    is never another's."""
    lists = (POLICY, frozenset(), frozenset({"tanh"}), POLICY)
    dtypes = [_under_policy(lambda: (h.exp().dtype, h.tanh().dtype), ops) for ops in lists]
    assert dtypes == [(torch.float32, BF16), (BF16, BF16), (BF16, torch.float32)] + [
        (torch.float32, BF16)
    ]


def test_a_mode_inside_the_policys_still_sees_a_leafs_call_and_so_does_the_policy() -> None:
    """The mode is set aside only where it is the innermost one: a mode entered inside it
    (an op island's, a fill's) sees the leaf's call first, then the policy does."""
    half = halfprec.convert(_Encoder().eval(), "bf16")
    x = torch.randn(2, 8, dtype=BF16)
    with Fp32OpsMode(BF16, POLICY), _Record() as inner, torch.inference_mode():
        _, handled = _handled(half.proj, x)
    assert inner.names == ["linear"] and handled == ["linear"]


def test_compiling_before_any_eager_call_keeps_one_graph() -> None:
    """The mode's per-function cache is filled in eager mode only: compiled first, with
    the cache empty, its writes split the graph (PonderNet's step: 12 graphs, not 1)."""
    from torch import _dynamo as dynamo

    from halfprec.convert import op_policy

    class Step(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 1)

        def forward(self, h: torch.Tensor, acc: torch.Tensor) -> Any:
            p = torch.sigmoid(self.lin(h))
            return acc + torch.log(p), acc + torch.log1p(-p)

    half = halfprec.convert(Step().eval(), "fp16")
    args = (torch.randn(4, 8), torch.zeros(4, 1))
    op_policy._LOOKS.clear()
    dynamo.reset()
    try:
        assert dynamo.explain(half)(*args).graph_count == 1
    finally:
        dynamo.reset()
    assert not op_policy._LOOKS or all(not v for v in op_policy._LOOKS.values())


def test_the_mode_keeps_no_tensor_alive_through_a_method_bound_to_it() -> None:
    """A function the mode sees may be bound to a tensor (``handle_torch_function`` takes
    any callable): the mode's per-function cache must not hold that tensor."""
    t = torch.ones(3, dtype=BF16)
    alive = weakref.ref(t)
    with Fp32OpsMode(BF16, POLICY):
        out = torch.overrides.handle_torch_function(t.exp, (t,))
    torch.testing.assert_close(out.float(), torch.ones(3).exp(), rtol=1e-2, atol=0)
    del t, out
    gc.collect()
    assert alive() is None


def test_the_default_list_names_only_torch_functions() -> None:
    """Its torch.fft and torch.linalg names are those namespaces' functions, by the names a
    mode sees them under; no class, module or docstring fragment they also hold."""
    spaces = {"fft": torch.fft, "linalg": torch.linalg}
    named = [n for n in DEFAULT_FP32_OPS if n.split("_", 1)[0] in spaces and "_" in n]
    assert "fft_rfft" in named and "linalg_svd" in named and "linalg_matmul" not in named
    for name in named:
        space, attr = name.split("_", 1)
        value = getattr(spaces[space], attr)
        assert callable(value) and not isinstance(value, type), name
    assert torch.fft.rfft.__name__ == "fft_rfft"  # the name the policy's mode matches


def test_a_compiled_converted_model_compiles_once_in_a_fresh_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a fresh process: no eager call has filled the mode's per-process lookup cache yet
    monkeypatch.setattr(op_policy, "_LOOKS", {})
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(halfprec.convert(_Block(), "bf16"), backend=counter)
    x = torch.randn(4, 8)
    with torch.no_grad():
        first = compiled(x)
        torch.testing.assert_close(compiled(x), first, rtol=0, atol=0)
    assert counter.frame_count == 1  # as many graphs as fp32: the second call reuses it
    torch._dynamo.reset()
