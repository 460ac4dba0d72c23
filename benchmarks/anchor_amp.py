"""halfprec ``tune`` vs onnxconverter-common's ``auto_convert_mixed_precision`` (the anchor),
on halfprec's own hazard models, both judged in true fp16.

    HF_HUB_OFFLINE=1 PYTHONPATH=src python benchmarks/anchor_amp.py [--cases a,b] [--json]

Per hazard (``testbed.hazards`` and ``testbed.root_hazards``, all of them):

- **anchor**: the fp32 model exported to ONNX (torch.onnx dynamo, static shapes), then
  ``auto_convert_mixed_precision(model, feed_dict, validate_fn=..., keep_io_types=True)``
  (onnxconverter-common 1.16 signature: ``(model, feed_dict, validate_fn=None, rtol=None,
  atol=None, keep_io_types=False)``). Its search validates on batch 0 with halfprec's own
  fp16 check (``compare_outputs``, cosine >= 0.999 and SQNR >= 25 dB), so both tools aim at
  the same target. The search runs twice: as shipped (in onnxruntime's CPU provider, which
  runs most fp16 nodes in fp32 behind inserted casts and so hides overflow), and with its
  evaluations swapped for the true-fp16 evaluator below.
- **true fp16** for ONNX: ``onnx.reference.ReferenceEvaluator`` (numpy: every fp16 tensor
  is stored and rounded in fp16, so a value above 65504 becomes inf as on a GPU; numpy's
  fp16 matmul accumulates in fp32, as GPU kernels do). The anchor's final graph is judged
  there on every batch against PyTorch fp32; the onnxruntime CPU verdict is printed beside it.
- **halfprec**: ``halfprec.tune(model, batches, "fp16")``; the tuned model is judged with
  ``halfprec.compare`` in PyTorch fp16 on CPU (fp16 storage, every op rounded to fp16).
- **fp32 share**: anchor: fp32 compute nodes / all float compute nodes (Cast and
  Constant not counted), and FLOPs of fp32 MatMul/Gemm/Conv nodes over all of theirs
  (shapes from ONNX shape inference); halfprec: ``report.fp32_flops_share`` (matmul/conv
  FLOPs from ``torch.utils.flop_counter``, op islands counted at their own FLOPs).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import io
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx.reference import ReferenceEvaluator

import halfprec
from halfprec.compare import Tolerance, compare_outputs, run_reference
from halfprec.dtypes import device_support
from halfprec.export.api import write_artifact
from halfprec.export.capture import forward_params, named_inputs
from halfprec.export.config import ExportConfig
from halfprec.export.info import ArtifactInfo
from halfprec.export.onnx import OnnxSession
from halfprec.timing import now
from halfprec.tree import flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testbed/
from testbed.hazards import HAZARDS, Hazard  # noqa: E402
from testbed.root_hazards import ROOT_HAZARDS  # noqa: E402

CASES: dict[str, Hazard] = {**HAZARDS, **ROOT_HAZARDS}
FP16 = torch.float16
_FLOAT, _FLOAT16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
_NOT_COMPUTE = {"Cast", "Constant", "Identity", "Shape", "Reshape", "Unsqueeze", "Squeeze"}
Feeds = dict[str, np.ndarray]


@dataclass
class AnchorRun:
    search: str  # "onnxruntime" or "true fp16"
    passed: bool  # judged in true fp16, every batch
    ort_passed: bool | None  # the same graph judged on onnxruntime CPU
    fp32_nodes: float | None
    fp32_flops: float | None
    blocked: int  # nodes the search kept fp32
    seconds: float
    detail: str


@dataclass
class HalfprecRun:
    passed: bool
    fp32_flops: float | None
    fp32_params: float
    islands: str
    seconds: float
    detail: str


@dataclass
class Case:
    name: str
    pattern: str
    naive_passed: bool
    anchors: list[AnchorRun]
    halfprec: HalfprecRun


# -- ONNX plumbing ----------------------------------------------------------------------------
def _export_fp32(
    model: torch.nn.Module, batches: list[Any], refs: list[Any], path: Path
) -> list[Feeds]:
    """Export the fp32 model to ``path`` (static shapes); the batches as ONNX feeds."""
    params = forward_params(model)
    named = [named_inputs(b, params) for b in batches]
    info = ArtifactInfo(
        format="onnx",
        dtype="fp32",
        io_dtype="fp32",
        model=type(model).__name__,
        params=params,
        inputs=tuple(flatten(named[0])),
        outputs=tuple(flatten(refs[0])),
    )
    write_artifact(ExportConfig(format="onnx", dynamic=False), model, named, path, info)
    return [{k: v.numpy() for k, v in flatten(n).items()} for n in named]


def _true_fp16(proto: onnx.ModelProto, feeds: Feeds) -> list[np.ndarray]:
    return list(ReferenceEvaluator(proto).run(None, feeds))


def _on_ort(proto: onnx.ModelProto, feeds: Feeds) -> list[np.ndarray]:
    with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
        onnx.save(proto, f.name)
        session = OnnxSession(Path(f.name))
        return list(session.session.run(None, feeds))


def _as_output(names: list[str], values: list[np.ndarray]) -> dict[str, torch.Tensor]:
    return {
        n: torch.from_numpy(np.asarray(v, dtype=np.float32))
        for n, v in zip(names, values, strict=True)
    }


def _judge(
    names: list[str], refs: list[Any], outs: list[list[np.ndarray]], tol: Tolerance
) -> tuple[bool, str]:
    ref = [flatten(r) for r in refs]
    cmp = compare_outputs(ref, [_as_output(names, o) for o in outs], tolerance=tol, dtype=FP16)
    return cmp.passed, "" if cmp.passed else cmp.reason


@contextlib.contextmanager
def _search_in_true_fp16() -> Iterator[None]:
    """The anchor's search, with its full-graph evaluations run by the true-fp16 evaluator
    (its dtype probe of intermediate outputs stays on onnxruntime)."""
    from onnxconverter_common import auto_mixed_precision as amp

    shipped = amp.get_tensor_values_using_ort

    def evaluate(model: Any, feeds: Any, output_names: Any = None, sess_options: Any = None) -> Any:
        if output_names is not None:
            return shipped(model, feeds, output_names, sess_options)
        return _true_fp16(model, feeds)

    amp.get_tensor_values_using_ort = evaluate
    try:
        yield
    finally:
        amp.get_tensor_values_using_ort = shipped


# -- fp32 share of an ONNX graph ----------------------------------------------------------------
def _types_and_shapes(proto: onnx.ModelProto) -> tuple[dict[str, int], dict[str, list[int]]]:
    inferred = onnx.shape_inference.infer_shapes(proto)
    g = inferred.graph
    types: dict[str, int] = {t.name: t.data_type for t in g.initializer}
    shapes: dict[str, list[int]] = {t.name: list(t.dims) for t in g.initializer}
    for v in [*g.input, *g.value_info, *g.output]:
        tt = v.type.tensor_type
        types[v.name] = tt.elem_type
        shapes[v.name] = [d.dim_value for d in tt.shape.dim]
    for node in g.node:  # Constant nodes carry their type in the attribute
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    types[node.output[0]] = a.t.data_type
                    shapes[node.output[0]] = list(a.t.dims)
    return types, shapes


def _flops(node: onnx.NodeProto, shapes: dict[str, list[int]]) -> int:
    out = shapes.get(node.output[0], [])
    if not out or 0 in out:
        return 0
    size = int(np.prod(out))
    if node.op_type == "MatMul":
        return 2 * size * shapes[node.input[0]][-1]
    if node.op_type == "Gemm":
        trans = any(a.name == "transA" and a.i for a in node.attribute)
        a = shapes[node.input[0]]
        return 2 * size * (a[0] if trans else a[-1])
    if node.op_type == "Conv":
        w = shapes[node.input[1]]
        return 2 * size * int(np.prod(w[1:]))
    return 0


def fp32_share(proto: onnx.ModelProto) -> tuple[float | None, float | None]:
    """(fp32 compute nodes / float compute nodes, fp32 FLOPs / all matmul/conv FLOPs), on
    halfprec's basis: matmul/conv FLOPs, plus one per output element of other fp32 nodes."""
    types, shapes = _types_and_shapes(proto)
    nodes = fp32 = 0
    flops = fp32_flops = 0
    for node in proto.graph.node:
        if node.op_type in _NOT_COMPUTE:
            continue
        floats = [types.get(i) for i in node.input if types.get(i) in (_FLOAT, _FLOAT16)]
        if not floats:
            continue
        wide = _FLOAT in floats
        nodes += 1
        fp32 += wide
        f = _flops(node, shapes)
        flops += f
        if wide:  # like halfprec's op islands: an op without matmul FLOPs counts its outputs
            out = shapes.get(node.output[0], [])
            fp32_flops += f or (int(np.prod(out)) if out and 0 not in out else 0)
    return (fp32 / nodes if nodes else None), (min(1.0, fp32_flops / flops) if flops else None)


# -- the two tools ----------------------------------------------------------------------------
def run_anchor(
    fp32: onnx.ModelProto,
    feeds: list[Feeds],
    refs: list[Any],
    names: list[str],
    *,
    true_fp16_search: bool,
) -> AnchorRun:
    from onnxconverter_common.auto_mixed_precision import auto_convert_mixed_precision

    tol = Tolerance.for_dtype(FP16)

    def validate(res0: list[np.ndarray], res1: list[np.ndarray]) -> bool:
        ref = [_as_output(names, res0)]
        return compare_outputs(ref, [_as_output(names, res1)], tolerance=tol).passed

    search = "true fp16" if true_fp16_search else "onnxruntime"
    start = now()
    log = io.StringIO()
    scope = _search_in_true_fp16() if true_fp16_search else contextlib.nullcontext()
    try:
        with scope, contextlib.redirect_stdout(log):
            half = auto_convert_mixed_precision(
                copy.deepcopy(fp32), feeds[0], validate_fn=validate, keep_io_types=True
            )
    except Exception as exc:  # the anchor raises ValueError when no node set validates
        seconds = now() - start
        detail = f"search failed: {type(exc).__name__}: {str(exc).splitlines()[0][:400]}"
        return AnchorRun(search, False, None, None, None, 0, seconds, detail)
    seconds = now() - start
    done = [ln for ln in log.getvalue().splitlines() if ln.startswith("Done:")]
    blocked = len(ast.literal_eval(done[-1][len("Done:") :])) if done else 0
    passed, detail = _judge(names, refs, [_true_fp16(half, f) for f in feeds], tol)
    try:
        ort_passed, _ = _judge(names, refs, [_on_ort(half, f) for f in feeds], tol)
    except Exception:  # onnxruntime may reject the converted graph
        ort_passed = None
    nodes, flops = fp32_share(half)
    return AnchorRun(search, passed, ort_passed, nodes, flops, blocked, seconds, detail)


def run_halfprec(model: torch.nn.Module, batches: list[Any]) -> HalfprecRun:
    start = now()
    result = halfprec.tune(model, batches, "fp16")
    seconds = now() - start
    report = result.report
    if result.model is None:
        note = report.variants[0].note if report.variants else report.reason
        return HalfprecRun(False, None, 1.0, "-", seconds, note)
    check = halfprec.compare(model, result.model, batches)
    islands = [*report.keep_fp32, *(str(o) for o in report.op_islands)]
    return HalfprecRun(
        passed=check.passed,
        fp32_flops=report.fp32_flops_share,
        fp32_params=report.fp32_share,
        islands="; ".join(islands) or "none",
        seconds=seconds,
        detail="" if check.passed else check.reason,
    )


def run_case(name: str, folder: Path) -> Case:
    hazard = CASES[name]
    model, batches = hazard.build()
    refs = run_reference(model, batches)
    naive = halfprec.compare(model, copy.deepcopy(model).half(), batches).passed
    path = folder / f"{name}.onnx"
    feeds = _export_fp32(model, batches, refs, path)
    fp32 = onnx.load(str(path))
    names = [o.name for o in fp32.graph.output]
    anchors = [run_anchor(fp32, feeds, refs, names, true_fp16_search=t) for t in (False, True)]
    return Case(name, hazard.pattern, naive, anchors, run_halfprec(model, batches))


# -- output -------------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _mark(ok: bool | None) -> str:
    return "-" if ok is None else ("pass" if ok else "FAIL")


def table(cases: list[Case]) -> str:
    head = (
        "| case | `.half()` | anchor, ORT search: true fp16 / ORT | fp32 nodes / FLOPs "
        "| anchor, true-fp16 search: true fp16 / ORT | fp32 nodes / FLOPs | halfprec tune "
        "| fp32 FLOPs "
        "(params) | halfprec islands |"
    )
    lines = [head, "|" + "---|" * 9]
    for c in cases:
        a, b = c.anchors
        h = c.halfprec
        lines.append(
            f"| {c.name} | {_mark(c.naive_passed)} | {_mark(a.passed)} / {_mark(a.ort_passed)} "
            f"| {_pct(a.fp32_nodes)} / {_pct(a.fp32_flops)} | {_mark(b.passed)} / "
            f"{_mark(b.ort_passed)} "
            f"| {_pct(b.fp32_nodes)} / {_pct(b.fp32_flops)} | {_mark(h.passed)} "
            f"| {_pct(h.fp32_flops)} ({_pct(h.fp32_params)}) | {h.islands} |"
        )
    n = len(cases)

    def total(pick: Callable[[Case], bool]) -> int:
        return sum(pick(c) for c in cases)

    lines.append(
        f"| **total** | {total(lambda c: c.naive_passed)}/{n} "
        f"| {total(lambda c: c.anchors[0].passed)}/{n} / "
        f"{total(lambda c: bool(c.anchors[0].ort_passed))}/{n} | "
        f"| {total(lambda c: c.anchors[1].passed)}/{n} / "
        f"{total(lambda c: bool(c.anchors[1].ort_passed))}/{n} | "
        f"| {total(lambda c: c.halfprec.passed)}/{n} | | |"
    )
    return "\n".join(lines)


def verdict(cases: list[Case]) -> list[str]:
    """Cases an anchor run fixes and halfprec does not, or fixes with fewer fp32 FLOPs."""
    out = []
    for c in cases:
        h = c.halfprec
        for a in c.anchors:
            if a.passed and not h.passed:
                out.append(f"{c.name}: the anchor ({a.search} search) passes, halfprec fails")
            elif a.passed and (h.fp32_flops or 0.0) > (a.fp32_flops or 0.0):
                out.append(
                    f"{c.name}: fp32 FLOPs share {100 * (h.fp32_flops or 0):.4f}% (halfprec) > "
                    f"{100 * (a.fp32_flops or 0):.4f}% (anchor, {a.search} search)"
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated hazard names (default all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = [n for n in args.cases.split(",") if n] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    import onnxconverter_common
    import onnxruntime

    cases = []
    with tempfile.TemporaryDirectory(prefix="halfprec-anchor-") as tmp:
        for name in names:
            cases.append(run_case(name, Path(tmp)))
            print(f"# {name} done", flush=True)
    if args.json:
        print(json.dumps([asdict(c) for c in cases], indent=2))
        return
    cpu = device_support("cpu")
    print(
        f"onnxconverter-common {onnxconverter_common.__version__}, onnxruntime "
        f"{onnxruntime.__version__}, onnx {onnx.__version__}, torch {torch.__version__}; "
        f"cpu: {cpu.name}"
    )
    print(
        "true fp16: ONNX graphs run by onnx.reference.ReferenceEvaluator (numpy fp16); "
        "halfprec's model run by PyTorch fp16 on CPU; both against PyTorch fp32 with "
        "halfprec's fp16 tolerance (cosine >= 0.999, SQNR >= 25 dB) on every batch"
    )
    print(table(cases))
    for c in cases:
        for a in c.anchors:
            if a.detail:
                print(f"- {c.name}, anchor ({a.search} search): {a.detail}")
        if c.halfprec.detail:
            print(f"- {c.name}, halfprec: {c.halfprec.detail}")
    print("'-' under ORT: the search gave no graph, or onnxruntime refuses it (type error)")
    lost = verdict(cases)
    if not lost:
        print("halfprec fixes every case the anchor fixes, with no larger fp32 FLOPs share")
    print("\n".join(f"- behind the anchor: {x}" for x in lost))


if __name__ == "__main__":
    main()
