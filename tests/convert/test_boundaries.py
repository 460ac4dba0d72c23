"""convert/boundaries.py: the root's label, guards that cast stray fp32 inputs, and fp32
islands that take any call and hand back the caller's dtype (or fp32 where it cannot hold
the value)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from halfprec import Recipe, convert
from halfprec.convert import conversion_report, convert_
from halfprec.convert.op_policy import DEFAULT_FP32_OPS, LEGACY_NON_OPS
from halfprec.errors import HalfprecError
from halfprec.report.common import fp32_text

# no op policy and half inputs: only the guards stand between fp32 and a half Linear
GUARDS_ONLY = Recipe(dtype="fp16", fp32_ops=(), fp32_inputs=False)


@pytest.mark.parametrize(
    ("fp32_ops", "label"),
    [
        ((), "Linear[halfprec fp16]"),
        (("exp",), "Linear[halfprec fp16, 1 fp32 op]"),
        (("exp", "log"), "Linear[halfprec fp16, 2 fp32 ops]"),
        (DEFAULT_FP32_OPS, "Linear[halfprec fp16, autocast fp32 ops]"),
        # a recipe written when the default list also held a few names of no op
        ((*DEFAULT_FP32_OPS, *LEGACY_NON_OPS), "Linear[halfprec fp16, autocast fp32 ops]"),
        (
            (*DEFAULT_FP32_OPS, "my_op"),
            f"Linear[halfprec fp16, {len(DEFAULT_FP32_OPS) + 1} fp32 ops]",
        ),  # noqa: E501
    ],
)
def test_the_root_s_label_names_the_dtype_and_the_op_policy(
    fp32_ops: tuple[str, ...], label: str
) -> None:
    half = convert(nn.Linear(2, 2), Recipe(dtype="fp16", fp32_ops=fp32_ops, fp32_params_up_to=0))
    assert half._get_name() == label


class StrayInput(nn.Module):
    """Hands an fp32 tensor made in forward to a half Linear, positionally and by keyword."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 4)
        self.out = Shifted()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stray = torch.zeros(x.shape) + self.inp(x)  # fp32 + half -> fp32
        return self.out(stray, shift=torch.ones(4, dtype=self.inp.weight.dtype))


class Shifted(nn.Linear):
    def __init__(self) -> None:
        super().__init__(4, 4)

    def forward(self, x: torch.Tensor, *, shift: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + shift


def test_a_guard_casts_a_stray_fp32_input_and_passes_keywords_on() -> None:
    torch.manual_seed(0)
    model = StrayInput().eval()
    x = torch.randn(3, 4)
    out = convert(model, GUARDS_ONLY)(x)
    torch.testing.assert_close(out, model(x), atol=2e-2, rtol=2e-2)
    unguarded = convert(model, GUARDS_ONLY.replace(guard_boundaries=False))
    with pytest.raises(RuntimeError, match="dtype"):
        unguarded(x)  # the control: without the guard the stray fp32 meets half weights


class KeywordIsland(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
        self.seen += [x.dtype, scale.dtype]
        return x * scale


class Calls(nn.Module):
    def __init__(self, island: nn.Module, keyword: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.island = island
        self.keyword = keyword

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        out = self.island(h, scale=torch.full_like(h, 2.0)) if self.keyword else self.island(h)
        self.got = out.dtype
        return out


def test_an_island_widens_keyword_inputs_too_and_hands_back_the_caller_s_dtype() -> None:
    half = convert(
        Calls(KeywordIsland(), keyword=True), Recipe(dtype="fp16", keep_fp32=("island",))
    )
    half(torch.randn(2, 4))
    assert half.island.seen == [torch.float32, torch.float32]
    assert half.got == torch.float16


def test_a_norm_island_with_a_mixed_kernel_takes_its_input_by_keyword() -> None:
    half = convert(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)), "fp16")
    x = torch.randn(2, 4, dtype=torch.float16)
    torch.testing.assert_close(half[1](input=x), half[1](x), atol=0, rtol=0)


def test_an_island_called_without_floating_tensors_returns_its_own_output() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4))
    half = convert(model, Recipe(dtype="fp16", keep_fp32=("0",)))
    ids = torch.tensor([[1, 2]])
    assert half[0](ids).dtype == torch.float32  # no caller dtype to hand back
    torch.testing.assert_close(half(ids), model(ids), atol=2e-2, rtol=2e-2)


class Emits(nn.Module):
    """Returns a fixed fp32 value in place of its input."""

    def __init__(self, value: torch.Tensor) -> None:
        super().__init__()
        self.value = nn.Parameter(value, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.value + 0 * x.sum()


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        ([1e5], torch.float32),  # one element beyond fp16: kept fp32
        ([65504.0, 1.0], torch.float16),  # fp16's max itself fits
        ([], torch.float16),  # nothing to check
    ],
)
def test_an_island_keeps_fp32_only_what_the_caller_s_dtype_cannot_hold(
    value: list[float], dtype: torch.dtype
) -> None:
    island = Emits(torch.tensor(value))
    half = convert(Calls(island), Recipe(dtype="fp16", keep_fp32=("island",)))
    half(torch.randn(2, 4))
    assert half.got == dtype


def test_a_norm_island_always_hands_back_the_caller_s_dtype() -> None:
    # no range check on every norm: a norm's output is normalized, so it is cast back
    norm = nn.LayerNorm(4)
    with torch.no_grad():
        norm.weight.fill_(1e5)
    half = convert(Calls(norm), Recipe(dtype="fp16", mixed_kernels=False))
    half(torch.randn(2, 4))
    assert half.got == torch.float16


# -- islands that hand their outputs on in fp32 (Recipe.fp32_outputs) -----------------------
def _ponder() -> tuple[nn.Module, list[tuple[torch.Tensor, ...]]]:
    from testbed.heldout_handoff import ponder

    return ponder()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_an_island_handing_on_fp32_gives_the_next_module_the_fp32_value(dtype: str) -> None:
    """PonderNet's halting probability near 0.9999 fits the half dtype, so the island narrows
    it to 1.0 and the sibling's log(1 - p) is -inf; handed on in fp32 it matches fp32."""
    model, batches = _ponder()
    x = batches[0][0]
    with torch.no_grad():
        want = model(x)
        narrowed = convert(model, Recipe(dtype, keep_fp32=("step.halt",)))(x)
        handed = convert(
            model, Recipe(dtype, keep_fp32=("step.halt",), fp32_outputs=("step.halt",))
        )(x)
    assert torch.isfinite(want).all() and not torch.isfinite(narrowed).all()
    assert torch.isfinite(handed).all()
    torch.testing.assert_close(handed, want, atol=0.1, rtol=0.02)


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.lin(x))


class GatedHalf(nn.Module):
    """A gate's output into a half Linear module and into a functional GEMM."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 4)
        self.gate = Gate()
        self.out = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.gate(self.inp(x))
        self.got = g.dtype
        return self.out(g) + nn.functional.linear(g, self.out.weight)


@pytest.mark.parametrize("policy", [Recipe("fp16"), GUARDS_ONLY], ids=["defaults", "no-policy"])
def test_a_handed_on_fp32_output_is_cast_where_a_half_module_or_gemm_takes_it(
    policy: Recipe,
) -> None:
    """With no op policy and half inputs, nothing else would cast it for the functional
    GEMM: fp32 against half weights used to raise "expected m1 and m2 to have the same
    dtype"."""
    torch.manual_seed(0)
    model, x = GatedHalf().eval(), torch.randn(2, 4)
    half = convert(model, policy.replace(keep_fp32=("gate",), fp32_outputs=("gate",)))
    with torch.no_grad():
        out, want = half(x), model(x)
    assert half.got == torch.float32
    torch.testing.assert_close(out, want, atol=1e-2, rtol=1e-2)


def test_a_hand_off_is_shown_in_print_and_in_the_conversion_report() -> None:
    model, _ = _ponder()
    half = convert(model, Recipe("fp16", keep_fp32=("step.halt",), fp32_outputs=("step.halt",)))
    assert "(halt): Halting[fp32 island, fp32 output](" in str(half)
    report = conversion_report(half)
    assert report is not None and report.fp32_outputs == ["step.halt"]
    assert "outputs handed on in fp32: step.halt" in fp32_text(report)
    plain = conversion_report(convert(model, Recipe("fp16", keep_fp32=("step.halt",))))
    assert plain is not None and plain.fp32_outputs == []


def test_a_norm_island_handing_on_fp32_casts_instead_of_its_mixed_kernel() -> None:
    half = convert(Calls(nn.LayerNorm(4)), Recipe("fp16", fp32_outputs=("island",)))
    half(torch.randn(2, 4))
    assert half.got == torch.float32
    default = convert(Calls(nn.LayerNorm(4)), Recipe("fp16"))
    default(torch.randn(2, 4))
    assert default.got == torch.float16


def test_a_module_with_op_islands_hands_its_fp32_outputs_on_too() -> None:
    from halfprec.convert import OpRef

    ref = OpRef("step.halt", "sigmoid", "heldout_handoff.py:28", ordinal=0)
    model, batches = _ponder()
    x = batches[0][0]
    with torch.no_grad():
        want = model(x)
        narrowed = convert(model, Recipe("fp16", op_islands=(ref,)))(x)
        half = convert(model, Recipe("fp16", op_islands=(ref,), fp32_outputs=("step.halt",)))
        handed = half(x)
    assert not torch.isfinite(narrowed).all()
    torch.testing.assert_close(handed, want, atol=0.1, rtol=0.02)
    assert "(halt): Halting[1 fp32 op, fp32 output](" in str(half)


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        (("step.hlt",), "fp32_outputs name 'step.hlt' matches no module of Ponder"),
        (
            ("step.going",),
            "fp32_outputs name 'step.going' is neither an fp32 island nor a module with op "
            "islands, so it has no fp32 output to hand on; add it to keep_fp32 too",
        ),
    ],
)
def test_a_hand_off_that_names_no_island_is_refused_before_anything_is_cast(
    outputs: tuple[str, ...], message: str
) -> None:
    model, _ = _ponder()
    weight = model.embed.weight
    with pytest.raises(HalfprecError, match=message):
        convert_(model, Recipe("fp16", keep_fp32=("step.halt",), fp32_outputs=outputs))
    assert model.embed.weight is weight and weight.dtype == torch.float32  # nothing cast


class KeywordRoot(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, *, bias: torch.Tensor) -> torch.Tensor:
        self.seen = bias.dtype
        return self.proj(x) + bias


def test_the_root_casts_keyword_inputs_too_and_passes_them_on() -> None:
    torch.manual_seed(0)
    model = KeywordRoot().eval()
    x, bias = torch.randn(2, 4), torch.ones(4)
    half = convert(model, GUARDS_ONLY)
    out = half(x, bias=bias)
    assert half.seen == torch.float16 and out.dtype == torch.float32
    torch.testing.assert_close(out, model(x, bias=bias), atol=2e-2, rtol=2e-2)


def test_fp32_inputs_without_an_op_policy_still_meet_half_weights_in_half() -> None:
    # the inputs stay fp32 at the root; the mode casts them where a half GEMM takes them
    torch.manual_seed(0)
    model = nn.Linear(4, 4).eval()
    x = torch.randn(2, 4)
    half = convert(model, Recipe(dtype="fp16", fp32_ops=(), fp32_inputs=True))
    torch.testing.assert_close(half(x), model(x), atol=2e-2, rtol=2e-2)
