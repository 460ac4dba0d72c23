"""Op-level fp32 islands: hazards inline in the root's forward, found, fixed and saved."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch

import halfprec
from halfprec import Recipe, compare, convert, diagnose, tune
from halfprec.convert import conversion_report
from halfprec.convert.op_islands import OpRef
from halfprec.diagnose import naive_half
from halfprec.errors import HalfprecError
from testbed import root_hazards
from testbed.root_hazards import ROOT_HAZARDS

HAZARDS_FILE = str(Path(root_hazards.__file__).resolve())


RAW_FP16 = Recipe(
    "fp16", fp32_ops=(), fp32_inputs=False, fp32_params_up_to=0
)  # the hazards as .half() meets them: no op policy, every parameter half


def _marked_line(hazard_name: str) -> str:
    """``root_hazards.py:N`` of the ``# <- hazard`` line in the hazard's class."""
    model, _ = ROOT_HAZARDS[hazard_name].build()
    lines, start = inspect.getsourcelines(type(model))
    n = next(i for i, line in enumerate(lines) if "# <- hazard" in line)
    return f"{os.path.basename(HAZARDS_FILE)}:{start + n}"


@pytest.mark.parametrize("name", list(ROOT_HAZARDS))
def test_tune_fixes_root_hazard_with_a_tiny_fp32_share(name: str) -> None:
    hazard = ROOT_HAZARDS[name]
    model, batches = hazard.build()
    assert not compare(model, naive_half(model, torch.float16), batches).passed
    result = tune(model, batches, RAW_FP16)
    assert result.passed, result.report.variants[0].note
    assert result.keep_fp32 == ()  # no module island, let alone the whole (root) model
    share = result.report.fp32_flops_share
    assert share is not None and share <= 0.01
    assert all(o.module == hazard.culprit for o in result.report.op_islands)
    check = compare(model, convert(model, result.recipe), batches)
    assert check.passed, check.problems


@pytest.mark.parametrize("name", list(ROOT_HAZARDS))
def test_diagnose_names_the_op_and_its_source_line(name: str) -> None:
    hazard = ROOT_HAZARDS[name]
    model, batches = hazard.build()
    diag = diagnose(model, batches, "fp16")
    assert diag.divergence is not None
    assert diag.divergence.culprit == hazard.culprit
    culprit_op = diag.divergence.culprit_op or ""
    assert culprit_op.startswith(f"{hazard.op} at ")
    if hazard.culprit == "":  # the hazard sits in this file; the stem's op is torch's conv
        assert f" at {_marked_line(name)} " in culprit_op
    worst = diag.problem_ops(hazard.culprit)[0]
    assert worst.ref.op == hazard.op and worst.ref.module == hazard.culprit


def test_recipe_round_trips_op_islands_and_convert_applies_them(tmp_path: Path) -> None:
    model, batches = ROOT_HAZARDS["root-exp-softmax"].build()
    ref = OpRef("", "exp", _marked_line("root-exp-softmax"), 0)
    path = tmp_path / "recipe.json"
    Recipe(dtype=torch.float16, op_islands=(ref,), fp32_ops=(), fp32_inputs=False).save(path)
    assert json.loads(path.read_text())["op_islands"] == [ref.to_json()]
    loaded = Recipe.load(path)
    assert loaded.op_islands == (ref,)
    half = convert(model, path)
    report = conversion_report(half)
    assert report is not None and report.op_islands == [ref]
    assert compare(model, half, batches).passed
    plain = convert(model, RAW_FP16)
    assert not compare(model, plain, batches).passed  # the op island is what fixes it


def test_bad_op_islands_are_named() -> None:
    model, _ = ROOT_HAZARDS["root-exp-softmax"].build()
    ghost = Recipe(torch.float16, op_islands=(OpRef("nope", "exp", "m.py:1"),))
    with pytest.raises(HalfprecError, match="op island nope: exp at m.py:1 #0 names no module"):
        convert(model, ghost)
    with pytest.raises(ValueError, match="'file.py:line' location"):
        OpRef("", "exp", "no-line")
    with pytest.raises(ValueError, match="OpRef"):
        Recipe(torch.float16, op_islands=("exp",))  # type: ignore[arg-type]


def test_op_island_output_is_finite_and_cast_back() -> None:
    model, batches = ROOT_HAZARDS["root-exp-softmax"].build()
    ref = OpRef("", "exp", _marked_line("root-exp-softmax"), 0)
    half = convert(model, Recipe(torch.float16, op_islands=(ref,), fp32_ops=(), fp32_inputs=False))
    with torch.no_grad():
        out = half(*batches[0])
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_torch_export_carries_the_op_island_as_a_visible_cast() -> None:
    model, batches = ROOT_HAZARDS["root-exp-softmax"].build()
    ref = OpRef("", "exp", _marked_line("root-exp-softmax"), 0)
    half = convert(model, Recipe(torch.float16, op_islands=(ref,), fp32_ops=(), fp32_inputs=False))
    program = torch.export.export(half, batches[0], strict=False)
    nodes = {n.name: n for n in program.graph.nodes}
    [exp] = [n for n in nodes.values() if n.target == torch.ops.aten.exp.default]
    cast = exp.args[0]
    assert cast.target == torch.ops.aten.to.dtype and cast.args[1] == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(program.module()(*batches[0]), half(*batches[0]))


# -- op islands in exported files -------------------------------------------------------------
EPS_CASE = "root-eps-1e-12"  # x / sqrt(var + 1e-12): the island is the add, its eps kept


@pytest.fixture(scope="module")
def eps_policy() -> Recipe:
    model, batches = ROOT_HAZARDS[EPS_CASE].build()
    result = tune(model, batches, RAW_FP16)
    assert result.passed and result.report.op_islands == (
        OpRef("", "add", _marked_line(EPS_CASE), 0),
    )
    assert result.recipe is not None
    return result.recipe


# torch.onnx export and onnxruntime (~5 s)
@pytest.mark.slow
def test_onnx_export_carries_the_op_island_as_casts(eps_policy: Recipe, tmp_path: Path) -> None:
    import onnx
    from onnx.reference import ReferenceEvaluator

    from halfprec.export import load_artifact

    model, batches = ROOT_HAZARDS[EPS_CASE].build()
    path = tmp_path / "eps.onnx"
    result = halfprec.export(model, batches, path, eps_policy)
    assert result.passed, result.comparison.problems  # onnxruntime vs PyTorch fp32

    graph = onnx.load(str(path)).graph
    made_by = {o: n for n in graph.node for o in n.output}
    used_by: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            used_by.setdefault(i, []).append(n)
    consts = {t.name: t for t in graph.initializer}

    def cast_to(node: onnx.NodeProto | None) -> int | None:
        if node is None or node.op_type != "Cast":
            return None
        return next(a.i for a in node.attribute if a.name == "to")

    def eps_of(node: onnx.NodeProto) -> float | None:
        values = [onnx.numpy_helper.to_array(consts[i]) for i in node.input if i in consts]
        return values[0].item() if len(values) == 1 and values[0].size == 1 else None

    [add] = [n for n in graph.node if n.op_type == "Add" and eps_of(n) == pytest.approx(1e-12)]
    [wide] = [i for i in add.input if i not in consts]
    assert cast_to(made_by.get(wide)) == onnx.TensorProto.FLOAT  # Cast to fp32 before the op
    # downstream, the first Cast goes back to fp16, and feeds the half body's matmul
    node, seen = add, []
    while cast_to(node) is None:
        [node] = used_by[node.output[0]]
        seen.append(node.op_type)
    assert cast_to(node) == onnx.TensorProto.FLOAT16, seen
    assert {n.op_type for n in used_by[node.output[0]]} <= {"MatMul", "Gemm"}

    artifact = load_artifact(path)
    evaluator = ReferenceEvaluator(str(path))  # numpy fp16: no hidden fp32 kernels
    for batch in batches:
        out = artifact(batch)["output"]
        assert out.dtype == torch.float32 and torch.isfinite(out).all()
        [true_fp16] = evaluator.run(None, {"x": batch[0].numpy()})
        assert np.isfinite(true_fp16).all()
        np.testing.assert_allclose(true_fp16, out.numpy(), atol=0.02)


def test_pt2_export_carries_the_op_island_as_to_fp32(eps_policy: Recipe, tmp_path: Path) -> None:
    from halfprec.export import load_artifact

    model, batches = ROOT_HAZARDS[EPS_CASE].build()
    path = tmp_path / "eps.pt2"
    result = halfprec.export(model, batches, path, eps_policy)
    assert result.passed, result.comparison.problems

    def to_dtype(node: Any) -> torch.dtype | None:
        if node.target == torch.ops.aten.to.dtype:
            return cast(torch.dtype, node.args[1])
        if node.target == torch.ops.aten._to_copy.default:
            return cast(torch.dtype, node.kwargs.get("dtype"))
        return None

    graph = torch.export.load(path).graph  # our own file, written just above
    [add] = [n for n in graph.nodes if n.target == torch.ops.aten.add.Tensor and n.args[1] == 1e-12]
    assert to_dtype(add.args[0]) == torch.float32  # the op computes on an fp32 copy
    node = add
    while to_dtype(node) is None:
        [node] = [
            u for u in node.users if u.target != torch.ops.aten._assert_tensor_metadata.default
        ]
    assert to_dtype(node) == torch.float16  # back to half before the body
    for batch in batches:
        out = load_artifact(path)(batch)
        assert torch.isfinite(out).all()


class _ExpTimesScale(torch.nn.Module):
    """exp's fp32 result meets a half scale (too large to stay fp32) in an elementwise op."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((70_000,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x) * self.scale  # <- island


def test_torchscript_trace_keeps_carried_fp32_whatever_the_example_batch_held() -> None:
    # a trace records one path: a carried value that fit fp16 on the example batch must not
    # become a cast to fp16 for every later batch (eager keeps 12's exp, 162755, fp32)
    model = _ExpTimesScale().eval()
    lines, start = inspect.getsourcelines(_ExpTimesScale)
    line = start + next(i for i, text in enumerate(lines) if "# <- island" in text)
    ref = OpRef("", "exp", f"{os.path.basename(__file__)}:{line}", 0)
    half = convert(model, Recipe(torch.float16, op_islands=(ref,), fp32_params_up_to=0))
    big = torch.full((70_000,), 12.0)
    with torch.no_grad():
        assert torch.isfinite(half(big)).all()
        traced = torch.jit.trace(half, (torch.zeros(70_000),), check_trace=False)
        out = traced(big)
    torch.testing.assert_close(out, model(big).detach())
