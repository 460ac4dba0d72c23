"""Scaled op islands: a GEMM-type op computed in half on operands scaled by powers of two,
its result fp32 with the scales undone (halfprec.convert.scaled)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo as dynamo
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

import halfprec
from halfprec import Recipe, compare, convert, load, recipe_of, save
from halfprec.convert import OpRef, conversion_report
from halfprec.convert.scaled import TOP, inner_size, scale_operands
from halfprec.tree import iter_tensors
from testbed.heldout import HELDOUT

HALVES = [torch.float16, torch.bfloat16]
GRAM = OpRef("gram", "matmul", "heldout_sums.py:162", 0, ordinal=0, kind="scaled")


def _gram() -> tuple[nn.Module, list[Any]]:
    return HELDOUT["gram-overflow"].build()


def _run(model: nn.Module, batch: Any) -> torch.Tensor:
    with torch.inference_mode():
        return model(*batch)  # type: ignore[no-any-return]


def _scaled(op: str, args: tuple[Any, ...], dtype: torch.dtype, **kwargs: Any) -> torch.Tensor:
    """``op`` through scale_operands, as a scaled op island computes it."""
    func = getattr(F, op, None) or getattr(torch, op)
    with torch._C.DisableTorchFunction():
        s = scale_operands(op, args, kwargs, dtype)
        assert s is not None
        return s.undo(func(*s.args, **s.kwargs))


# -- the premise: half GEMMs accumulate in fp32 and round once ------------------------------
@pytest.mark.parametrize("dtype", HALVES)
def test_cpu_half_gemms_accumulate_in_fp32_and_round_once(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    k = 4096
    a = torch.rand(8, k, generator=g).to(dtype)
    b = torch.rand(k, 8, generator=g).to(dtype)
    exact = a.float() @ b.float()
    # one rounding to the half dtype: at most half its eps, relative (plus fp32 order noise)
    bound = (0.5 * torch.finfo(dtype).eps + 1e-5) * exact.abs()
    for out in (
        a @ b,
        torch.bmm(a[None], b[None])[0],
        F.linear(a, b.T),
        torch.einsum("ik,kj->ij", a, b),
    ):
        assert out.dtype == dtype
        assert ((out.float() - exact).abs() <= bound).all()
    acc = torch.zeros(8, 8, dtype=dtype)  # the control: half accumulation breaks the bound
    for i in range(k):
        acc = acc + a[:, i : i + 1] * b[i : i + 1, :]
    assert not ((acc.float() - exact).abs() <= bound).all()


# -- the scales -------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 3, 1024, 4097, 65504])
@pytest.mark.parametrize("peak", [2.0**-14, 1.0, 60000.0])
def test_the_worst_case_product_fits_for_any_inner_size(k: int, peak: float) -> None:
    """Every element at the peak: the product is exactly K * peak^2, the bound's worst case."""
    a = torch.full((2, k), peak, dtype=torch.float16)
    b = torch.full((k, 2), peak, dtype=torch.float16)
    out = _scaled("matmul", (a, b), torch.float16)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.full((2, 2), k * peak * peak), rtol=2**-10, atol=0)


@pytest.mark.parametrize("k", [1, 64, 4095, 4096])
def test_fp32_operands_just_below_a_power_of_two_fit_after_rounding_up(k: int) -> None:
    """An fp32 peak just below 2**e rounds up to exactly its bound when cast to fp16, so
    the bound itself must fit: K * 2**(ea + eb) <= 2**TOP <= 65504, where 2**16 would not,
    and ``K`` rounds up to a power of two (4095 * 2**4 would round to inf, 4095 * 2**3 not)."""
    peak = 1 - 2.0**-20
    a, b = torch.full((2, k), peak), torch.full((k, 2), peak)
    out = _scaled("matmul", (a, b), torch.float16)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, a @ b, rtol=2**-10, atol=0)


def test_the_shift_is_split_between_the_operands_as_the_module_docs_say() -> None:
    """K = 1024: the bound 2**15 leaves 2**5 per product, split as 2**2 and 2**3, so the
    operands' peaks land near 2**2 and 2**3 (not both at 2**2, nor at 1)."""
    g = torch.Generator().manual_seed(4)
    a, b = torch.rand(4, 1024, generator=g) * 1e-3, torch.rand(1024, 4, generator=g) * 50
    with torch._C.DisableTorchFunction():
        s = scale_operands("matmul", (a, b), {}, torch.float16)
    assert s is not None
    peaks = [t.abs().max().item() for t in s.args]
    assert 2.0 < peaks[0] <= 4.0 and 4.0 < peaks[1] <= 8.0


def test_a_tensor_times_itself_takes_one_scale() -> None:
    """``x @ x`` with an odd shift (K = 4: 15 - 2): one tensor, so one scale for both."""
    x = torch.rand(4, 4, generator=torch.Generator().manual_seed(3)) + 0.5
    torch.testing.assert_close(_scaled("matmul", (x, x), torch.float16), x @ x, rtol=2**-9, atol=0)


def test_operands_far_below_the_normal_range_are_raised_by_at_most_2_to_the_126() -> None:
    """A peak of 2**-140 would need a scale of 2**145, which is inf in fp32: the scale stops
    at 2**126, and the product, 2**-138, comes out exactly."""
    a, b = torch.full((2, 4), 2.0**-140), torch.ones(4, 2)
    out = _scaled("matmul", (a, b), torch.float16)
    torch.testing.assert_close(out, a @ b, rtol=0, atol=0)


def test_scales_are_powers_of_two_and_small_operands_are_raised_not_flushed() -> None:
    g = torch.Generator().manual_seed(1)
    a = torch.rand(4, 16, generator=g) * 1e-4  # products near 1e-8: zero in plain fp16
    b = torch.rand(16, 4, generator=g) * 1e-4
    with torch._C.DisableTorchFunction():
        s = scale_operands("matmul", (a.half(), b.half()), {}, torch.float16)
    assert s is not None
    for undo in (s.undo_a, s.undo_b):
        mantissa, _ = torch.frexp(undo)
        assert mantissa.item() == 0.5  # a power of two: scaling is exact
    peaks = [t.abs().max().item() for t in s.args]
    assert all(1.0 < p <= 2.0 ** (TOP // 2 + 1) for p in peaks)  # raised, within the bound
    exact = a.half().float() @ b.half().float()
    plain = (a.half() @ b.half()).float()
    scaled = _scaled("matmul", (a.half(), b.half()), torch.float16)
    assert ((plain - exact).abs() / exact).max() > 0.01  # plain fp16 loses the products
    torch.testing.assert_close(scaled, exact, rtol=2**-10, atol=0)


def test_a_nan_stays_in_its_rows_as_unscaled() -> None:
    a = torch.rand(3, 8).half()
    a[0, 2] = float("nan")
    out = _scaled("matmul", (a, torch.rand(8, 2).half()), torch.float16)
    assert out[0].isnan().all() and torch.isfinite(out[1:]).all()


@pytest.mark.parametrize(
    ("equation", "shapes", "k"),
    [
        ("bik,bjk->bij", [(2, 3, 5), (2, 4, 5)], 5),
        ("ij,jk", [(3, 7), (7, 2)], 7),
        ("...ij,...jk->...ik", [(2, 3, 7), (2, 7, 4)], 7),
        ("ij,k->", [(3, 4), (5,)], 60),
        ("...i,...i->", [(2, 3), (2, 3)], 6),
    ],
)
def test_einsum_inner_size_counts_every_summed_letter(
    equation: str, shapes: list[tuple[int, ...]], k: int
) -> None:
    a, b = (torch.ones(s) for s in shapes)
    assert inner_size("einsum", (a, b), (equation, a, b)) == k
    out = _scaled("einsum", (equation, a.half(), b.half()), torch.float16)
    torch.testing.assert_close(out, torch.einsum(equation, a, b))


def test_the_inner_size_of_a_matmul_is_its_left_operands_last_dimension() -> None:
    x, y = torch.ones(3, 2), torch.ones(5, 3)
    assert inner_size("matmul", (y, x), ()) == inner_size("__matmul__", (y, x), ()) == 3
    assert inner_size("__rmatmul__", (x, y), ()) == 3  # x.__rmatmul__(y) is y @ x
    assert inner_size("mv", (y, torch.ones(3)), ()) == 3
    assert inner_size("matmul", (torch.tensor(2.0), torch.tensor(3.0)), ()) == 1


def test_a_call_with_an_empty_operand_or_no_two_floating_ones_is_not_scaled() -> None:
    """None: the caller computes it in fp32 (an empty batch has no peak to scale by)."""
    ones = torch.ones(3, 2)
    with torch._C.DisableTorchFunction():
        assert scale_operands("matmul", (torch.empty(0, 3), ones), {}, torch.float16) is None
        assert scale_operands("matmul", (ones.long().T, ones.long()), {}, torch.float16) is None
        assert scale_operands("einsum", ("ij,jk,kl", ones, ones.T, ones), {}, torch.float16) is None


@pytest.mark.parametrize("dtype", HALVES)
def test_linear_and_conv_add_their_bias_in_fp32(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(2)
    x, w, bias = (torch.randn(*s, generator=g) * 300 for s in [(4, 64), (8, 64), (8,)])
    tol = {"rtol": 4 * torch.finfo(dtype).eps, "atol": 1e-3 * 300 * 300 * 64}
    exact = F.linear(x.to(dtype).float(), w.to(dtype).float(), bias)
    out = _scaled("linear", (x.to(dtype), w.to(dtype), bias), dtype)
    torch.testing.assert_close(out, exact, **tol)
    torch.testing.assert_close(_scaled("linear", (x.to(dtype), w.to(dtype)), dtype, bias=bias), out)
    img, kernel = torch.randn(1, 3, 6, 6, generator=g) * 300, torch.randn(4, 3, 3, 3, generator=g)
    assert inner_size("conv2d", (img, kernel), ()) == 27
    exact = F.conv2d(img.to(dtype).float(), kernel.to(dtype).float(), bias[:4], padding=1)
    out = _scaled("conv2d", (img.to(dtype), kernel.to(dtype), bias[:4], 1, 1), dtype)
    torch.testing.assert_close(out, exact, rtol=4 * torch.finfo(dtype).eps, atol=1.0)


@pytest.mark.parametrize(
    ("op", "image", "kernel"),
    [
        ("conv1d", (3, 5), (4, 3, 3)),  # unbatched: (channels, length)
        ("conv1d", (2, 3, 4), (4, 3, 1)),
        ("conv2d", (3, 4, 4), (4, 3, 1, 1)),  # unbatched, as many rows as out channels
        ("conv3d", (3, 2, 2, 2), (4, 3, 1, 1, 1)),
    ],
)
def test_a_convs_bias_goes_to_its_channels_batched_or_not(
    op: str, image: tuple[int, ...], kernel: tuple[int, ...]
) -> None:
    """torch's convs take an unbatched input too: the bias is per channel, not per column."""
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(*image, generator=g) * 30, torch.randn(*kernel, generator=g)
    bias = 100.0 * torch.arange(4.0)
    exact = getattr(F, op)(x.half().float(), w.half().float(), bias)
    out = _scaled(op, (x.half(), w.half(), bias), torch.float16)
    torch.testing.assert_close(out, exact, rtol=2**-9, atol=0.5)


# -- in a converted model ---------------------------------------------------------------
class _GemmDtypes(TorchFunctionMode):
    """The operand dtypes of every call of ``op`` that reaches this (outermost) mode."""

    def __init__(self, op: str = "matmul") -> None:
        super().__init__()
        self.op = op
        self.seen: list[set[torch.dtype]] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") == self.op:
            self.seen.append({a.dtype for _, a in iter_tensors(args)})
        return func(*args, **(kwargs or {}))


def test_scaled_island_is_finite_and_close_where_plain_half_overflows() -> None:
    model, batches = _gram()
    plain = convert(model, "fp16")
    assert not torch.isfinite(_run(plain, batches[0])).all()
    half = convert(model, Recipe("fp16", op_islands=(GRAM,)))
    wide = convert(model, Recipe("fp16", op_islands=(GRAM.with_kind("fp32"),)))
    assert "Gram[1 scaled half op]" in repr(half) and "Gram[1 fp32 op]" in repr(wide)
    report = conversion_report(half)
    assert report is not None and report.op_islands == [GRAM]
    assert report.to_json()["op_islands"][0]["kind"] == "scaled"
    assert compare(model, half, batches).passed
    for batch in batches:  # as close to fp32 as the fp32 island, within half rounding
        out, ref = _run(half, batch).float(), _run(wide, batch).float()
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, ref, rtol=2**-9, atol=0)
    for model_, dtype in ((half, torch.float16), (wide, torch.float32)):
        with _GemmDtypes() as mode:
            _run(model_, batches[0])
        assert mode.seen == [{dtype}]  # the scaled island's GEMM runs in half


def test_scaled_island_works_in_bf16() -> None:
    model, batches = _gram()
    half = convert(model, Recipe("bf16", op_islands=(GRAM,)))
    with _GemmDtypes() as mode:
        _run(half, batches[0])
    assert mode.seen == [{torch.bfloat16}]
    assert compare(model, half, batches).passed


class _Chain(nn.Module):
    """One einsum of three operands: no two-operand GEMM to scale."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("ij,jk,kl->il", x, self.a.weight, self.b.weight)


def test_a_scaled_einsum_of_three_operands_is_computed_in_fp32() -> None:
    model = _Chain().eval()
    x = torch.randn(4, 8) * 300
    ref = OpRef("", "einsum", "test_scaled.py:1", ordinal=0, kind="scaled")
    for kind in ("scaled", "fp32"):
        half = convert(model, Recipe("fp16", op_islands=(ref.with_kind(kind),)))
        with _GemmDtypes("einsum") as mode:
            out = _run(half, (x,))
        assert mode.seen == [{torch.float32}]
        torch.testing.assert_close(out, _run(model, (x,)), rtol=1e-2, atol=1e-2 * 300 * 64)
    with _GemmDtypes("einsum") as mode:
        _run(convert(model, "fp16"), (x,))
    assert mode.seen == [{torch.float16}]  # the control: without an island it runs half


def _graphs(model: nn.Module, batch: Any) -> int:
    dynamo.reset()
    return int(dynamo.explain(model)(*batch).graph_count)


def test_compiles_into_as_many_graphs_as_fp32() -> None:
    model, batches = _gram()
    half = convert(model, Recipe("fp16", op_islands=(GRAM,)))
    assert _graphs(half, batches[0]) == _graphs(model, batches[0]) == 1
    dynamo.reset()
    compiled = torch.compile(half, fullgraph=True, backend="eager")
    out = _run(compiled, batches[0])
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, _run(half, batches[0]), rtol=2**-9, atol=0)


def test_save_load_deepcopy_and_pickle_keep_the_scaled_island(tmp_path: Path) -> None:
    model, batches = _gram()
    half = convert(model, Recipe("fp16", op_islands=(GRAM,)))
    expected = [_run(half, b) for b in batches]
    path = save(half, tmp_path / "gram.safetensors")
    loaded = load(path, into=lambda: _gram()[0])
    assert recipe_of(loaded) == recipe_of(half)
    assert recipe_of(loaded).op_islands == (GRAM,)  # type: ignore[union-attr]
    for again in (loaded, copy.deepcopy(half), pickle.loads(pickle.dumps(half))):
        assert "Gram[1 scaled half op]" in repr(again)
        for batch, out in zip(batches, expected, strict=True):
            assert torch.equal(_run(again, batch), out)


def test_torch_export_carries_the_scaling_as_visible_ops() -> None:
    model, batches = _gram()
    half = convert(model, Recipe("fp16", op_islands=(GRAM,)))
    program = torch.export.export(half, batches[0], strict=False)
    nodes = [n for n in program.graph.nodes if n.op == "call_function"]
    targets = {n.target for n in nodes}
    assert {torch.ops.aten.max.default, torch.ops.aten.exp2.default} <= targets
    [matmul] = [n for n in nodes if n.target == torch.ops.aten.matmul.default]
    assert {a.meta["val"].dtype for a in matmul.args} == {torch.float16}
    assert matmul.meta["val"].dtype == torch.float16
    with torch.inference_mode():
        assert torch.equal(program.module()(*batches[1]), half(*batches[1]))


# torch.onnx export and onnxruntime (~8 s)
@pytest.mark.slow
def test_onnx_export_carries_the_scaling_and_a_half_matmul(tmp_path: Path) -> None:
    import onnx

    model, batches = _gram()
    path = tmp_path / "gram.onnx"
    result = halfprec.export(model, batches[:2], path, Recipe("fp16", op_islands=(GRAM,)))
    assert result.passed, result.comparison.problems  # onnxruntime against PyTorch fp32
    model_proto = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    graph = model_proto.graph
    kinds = {n.op_type for n in graph.node}
    assert {"ReduceMax", "Floor", "Pow", "MatMul"} <= kinds
    types = {v.name: v.type.tensor_type.elem_type for v in graph.value_info}
    [matmul] = [n for n in graph.node if n.op_type == "MatMul"]
    assert {types[i] for i in matmul.input} == {onnx.TensorProto.FLOAT16}
