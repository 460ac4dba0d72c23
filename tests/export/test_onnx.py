"""ONNX export: fp16 graph with fp32 islands and IO, checked with onnxruntime on CPU."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

import halfprec
from halfprec import Recipe
from halfprec.errors import DTypeError, InputsError, MissingExtraError
from halfprec.export import ExportError, load_artifact
from halfprec.export.config import ExportConfig
from halfprec.export.onnx import OnnxSession, check_providers
from support.export_models import custom, example_inputs, tiny

FLOAT, FLOAT16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16


def test_onnx_has_half_weights_fp32_islands_and_fp32_io(tmp_path: Path) -> None:
    model, batches = tiny(), example_inputs()
    path = tmp_path / "tiny.onnx"
    result = halfprec.export(model, batches, path)  # "auto" is fp16 for ONNX

    proto = onnx.load(str(path))
    assert proto.opset_import[0].version >= 17
    weights = {t.name: t.data_type for t in proto.graph.initializer}
    assert weights["l1.weight"] == FLOAT16
    assert weights["ln.weight"] == FLOAT  # the LayerNorm island
    assert [i.name for i in proto.graph.input] == ["x"]
    assert [o.name for o in proto.graph.output] == ["logits", "hidden"]
    assert {i.type.tensor_type.elem_type for i in proto.graph.input} == {FLOAT}
    assert {o.type.tensor_type.elem_type for o in proto.graph.output} == {FLOAT}

    assert result.passed, result.comparison.problems
    assert result.info.dtype == "fp16" and result.checked_batches == 2  # dynamic batch
    assert result.comparison["logits"].cosine > 0.999
    assert 0 < result.python_max_abs < 0.01  # onnxruntime's kernels, not PyTorch's
    casts = result.ort_casts
    assert casts is not None and casts.casts_in_file >= 4  # input, island in/out, outputs
    # fp16 nodes without a CPU kernel run in fp32 behind casts onnxruntime adds
    assert (casts.casts_inserted == 0) == (not casts.fp32_fallback_ops)

    out = load_artifact(path)(batches[1])
    assert out["logits"].dtype == torch.float32 and out["logits"].shape == (6, 4)
    # checked on the CPU provider here (no CUDA model), and the report says what that means
    assert any("CPUExecutionProvider, which runs most fp16 ops in fp32" in n for n in result.notes)
    assert load_artifact(path).runtime == "onnxruntime CPUExecutionProvider"


@pytest.mark.parametrize(
    ("device", "available", "providers"),
    [
        ("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"], ("CUDA", "CPU")),
        ("cuda:1", ["TensorrtExecutionProvider", "CUDAExecutionProvider"], ("CUDA", "CPU")),
        ("cuda", ["CPUExecutionProvider"], ("CPU",)),  # onnxruntime without its GPU build
        ("cpu", ["CUDAExecutionProvider", "CPUExecutionProvider"], ("CPU",)),
    ],
)
def test_a_file_is_checked_on_the_provider_that_runs_it(
    device: str, available: list[str], providers: tuple[str, ...]
) -> None:
    want = tuple(f"{p}ExecutionProvider" for p in providers)
    assert check_providers(device, available) == want


def test_onnx_latency_is_measured_for_fp32_and_half(tmp_path: Path) -> None:
    result = halfprec.export(tiny(), example_inputs(), tmp_path / "t.onnx", runs=3)
    lat = result.ort_latency
    assert lat is not None and len(lat.fp32.samples) == len(lat.half.samples) == 3
    assert lat.fp32.median > 0 and lat.half.median > 0
    assert lat.bytes_fp32 > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.onnx"]  # fp32 file was temporary


def test_bf16_onnx_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(DTypeError, match="bf16 ONNX is not supported.*--dtype fp16"):
        halfprec.export(tiny(), example_inputs(), tmp_path / "b.onnx", "bf16")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DTypeError, match="bf16 ONNX"):  # refused before anything runs
        ExportConfig.for_path("b.onnx", dtype="bf16")


def test_unsupported_operator_is_named_and_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="halfprec_tests.wobble has no ONNX translation"):
        halfprec.export(custom(), [torch.randn(2, 8)], tmp_path / "c.onnx")
    assert list(tmp_path.iterdir()) == []


class _ScatterAdd(torch.nn.Module):
    """A scatter-add onnxruntime's CPU kernels cannot run in fp16 (ScatterElements 'add')."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return torch.zeros_like(y).scatter_add(1, index, y)


def test_a_file_onnxruntime_cannot_run_is_an_error_and_not_kept(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.onnx"
    batch = (torch.randn(3, 4), torch.tensor([[0, 1, 2, 3]] * 3))
    with pytest.raises(
        ExportError,
        match=r"s\.onnx fails in its runtime \(onnxruntime: RUNTIME_EXCEPTION: .*"
        r"ScatterElements.*--keep-fp32.*-o NAME\.pt2",
    ):
        halfprec.export(_ScatterAdd(), batch, out, "fp16")
    assert not out.exists()
    # the one error line is all: onnxruntime does not log the failure to stderr as well
    assert "ScatterElements" not in capfd.readouterr().err


def test_missing_extra_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)  # what an uninstalled package looks like
    with pytest.raises(MissingExtraError, match=r"'onnx'.*pip install 'halfprec\[onnx\]'"):
        halfprec.export(tiny(), example_inputs(), tmp_path / "t.onnx")
    assert list(tmp_path.iterdir()) == []


class _Scaled(torch.nn.Module):
    """Rows divided by their peak plus an epsilon that is 0 in fp16 (so an fp32 island)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / (x.abs().amax(-1, keepdim=True) + 1e-12)


class _WithEps(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, 16, bias=False)
        self.scale = _Scaled()
        self.out = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.scale(self.inp(x)))


def test_a_tiny_epsilon_survives_the_onnx_optimizer(tmp_path: Path) -> None:
    # torch.onnx's optimizer took `+ 1e-12` for `+ 0` and dropped it: 0/0 = NaN on zero rows
    torch.manual_seed(0)
    batches = [torch.randn(4, 8), torch.randn(6, 8)]
    for b in batches:
        b[::2] = 0.0
    path = tmp_path / "eps.onnx"
    config = Recipe("fp16", keep_fp32=("scale",))
    result = halfprec.export(_WithEps().eval(), batches, path, config)
    assert result.passed, result.comparison.problems
    scalars = [
        onnx.numpy_helper.to_array(t).item()
        for t in onnx.load(str(path)).graph.initializer
        if t.data_type == FLOAT and np.prod(t.dims) == 1
    ]
    assert scalars.count(pytest.approx(1e-12)) == 1


class _HandNormNet(torch.nn.Module):
    """Linear -> a hand-written LayerNorm (eps 1e-12) -> Linear."""

    def __init__(self) -> None:
        super().__init__()
        from testbed.hazards import Standardizer

        self.l1 = torch.nn.Linear(16, 32)
        self.norm = Standardizer(32)
        self.l2 = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.norm(self.l1(x)))


def test_hand_written_layer_norm_island_runs_in_onnxruntime(tmp_path: Path) -> None:
    # onnxruntime's LayerNormFusion used to absorb the island's input Cast and refuse the
    # file ("LayerNormalization bound to different types"); halfprec fuses it in fp32 first
    torch.manual_seed(0)
    config = Recipe(dtype="fp16", keep_fp32=["norm"])
    x = torch.randn(8, 16)
    result = halfprec.export(_HandNormNet().eval(), x, tmp_path / "n.onnx", config, runs=0)
    assert result.passed, result.comparison.problems
    proto = onnx.load(str(result.path))
    (norm,) = [n for n in proto.graph.node if n.op_type == "LayerNormalization"]
    eps = next(a for a in norm.attribute if a.name == "epsilon")
    assert eps.f == pytest.approx(1e-12, rel=1e-3)  # BERT's epsilon kept, not rounded to 0
    types = {i.name: i.data_type for i in proto.graph.initializer}
    assert types[norm.input[1]] == onnx.TensorProto.FLOAT  # the island's weight stays fp32
    assert not [n for n in proto.graph.node if n.op_type == "ReduceMean"]


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    halfprec.export(tiny(), example_inputs(), path)
    return path


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda meta: [], "a JSON list, not an object"),
        (lambda meta: {**meta, "static_shapes": [1]}, "'static_shapes' must map input names"),
        (lambda meta: {**meta, "static_shapes": {"x": [-4, 8]}}, "lists of sizes >= 0"),
        (lambda meta: {**meta, "inputs": "x"}, "'inputs' must be a list of strings"),
        (lambda meta: {**meta, "dtype": "fp8"}, "'dtype' must be one of fp32, fp16, bf16"),
        (lambda meta: {**meta, "kv_cache": "no"}, "'kv_cache' must be true or false"),
        (lambda meta: {k: v for k, v in meta.items() if k != "outputs"}, "no 'outputs' field"),
    ],
)
def test_crafted_onnx_metadata_is_one_export_error(
    tiny_onnx: Path, tmp_path: Path, edit: Any, needle: str
) -> None:
    path = tmp_path / "tiny.onnx"
    proto = onnx.load(str(tiny_onnx))
    entry = next(p for p in proto.metadata_props if p.key == "halfprec.json")
    entry.value = json.dumps(edit(json.loads(entry.value)))
    onnx.save(proto, str(path))
    with pytest.raises(ExportError, match="its halfprec metadata is unreadable") as info:
        load_artifact(path)
    assert needle in str(info.value)


def test_a_session_takes_the_threads_it_is_given(tiny_onnx: Path) -> None:
    options = OnnxSession(tiny_onnx, threads=2).session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 1)
    default = OnnxSession(tiny_onnx).session.get_session_options()
    assert (default.intra_op_num_threads, default.inter_op_num_threads) == (0, 0)  # ort's own


def test_a_file_onnxruntime_cannot_read_is_one_line_naming_the_path_once(tmp_path: Path) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"not an ONNX model")
    with pytest.raises(ExportError) as caught:
        OnnxSession(path)
    text = str(caught.value)
    # onnxruntime's status and reason, without its "[ONNXRuntimeError] : 7 :" frame and
    # without its "Load model from PATH failed:" (the path is named once, first)
    assert re.fullmatch(
        rf"onnxruntime cannot load {re.escape(str(path))} \(INVALID_PROTOBUF: [^()\n]+\); "
        r"re-export it with halfprec export -o NAME.onnx",
        text,
    ), text
    assert text.count(str(path)) == 1


def test_a_session_names_the_input_that_is_missing_or_does_not_fit(tiny_onnx: Path) -> None:
    session = OnnxSession(tiny_onnx)
    with pytest.raises(
        InputsError,
        match=r"^the ONNX model needs inputs \['x'\] that the batch does not have; "
        r"give inputs named \['x'\]$",
    ):
        session.feeds({"y": torch.randn(3, 8)})
    with pytest.raises(
        InputsError,
        match=r"^input 'x' is int64 \[3, 8\], the ONNX model takes float32 \[(\w+), 8\] "
        r"\(\1: any size\); give 'x' in that dtype and shape$",
    ):
        session.run(session.feeds({"x": torch.ones(3, 8, dtype=torch.long)}))
    feeds = session.feeds({"x": torch.randn(5, 8), "unused": torch.randn(1)})
    assert list(feeds) == ["x"] and feeds["x"].shape == (5, 8)  # any batch size, by name


def test_an_onnx_file_returns_its_outputs_flat_by_name(tmp_path: Path) -> None:
    model, x = torch.nn.Linear(4, 2).eval(), torch.randn(3, 4)
    halfprec.export(model, [(x,)], tmp_path / "lin.onnx", "fp16", runs=0)
    out = load_artifact(tmp_path / "lin.onnx")((x,))  # docs/export.md: a bare tensor is "output"
    assert list(out) == ["output"] and out["output"].shape == (3, 2)


def test_a_static_export_that_fails_does_not_offer_static_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxscript")

    def fails(*args: object, **kwargs: object) -> None:  # torch.onnx's failure, injected
        raise ValueError("Unsupported FX nodes: {'call_function': ['aten.foo']}")

    monkeypatch.setattr(torch.onnx, "export", fails)
    model, x = torch.nn.Linear(4, 2).eval(), torch.randn(3, 4)
    with pytest.raises(ExportError) as info:
        halfprec.export(model, [(x,)], tmp_path / "lin.onnx", "fp16", dynamic=False)
    message = str(info.value)
    # halfprec's frame around torch.onnx's reason: the stage, the reason as one
    # "Type: line", and the one fix left, without --static
    assert re.fullmatch(
        r"torch\.onnx\.export failed: \w+: [^\n]+; export to a \.pt2 file \(-o NAME\.pt2\)",
        message,
    ), message
    assert "--static" not in message
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # T5 through torch.onnx
@pytest.mark.parametrize("dynamic", [True, False])
def test_t5_whose_reshape_of_a_transposed_view_fails_torch_onnx_exports(
    tmp_path: Path, dynamic: bool
) -> None:
    """T5's cross-attention reshapes a transposed tensor; torch.onnx's decomposition makes
    that a view, which its strides refuse ("Cannot view a tensor ..."), dynamic or static.
    halfprec gives each reshape a contiguous copy (no value changes) and the file runs."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    config = transformers.T5Config(
        d_model=32, d_kv=16, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=2,
        vocab_size=64, decoder_start_token_id=0,
    )  # fmt: skip
    model = transformers.T5ForConditionalGeneration(config).eval()
    ids = torch.randint(0, 64, (2, 8))
    batch = {"input_ids": ids, "decoder_input_ids": ids[:, :4]}
    result = halfprec.export(model, [batch], tmp_path / "t5.onnx", "fp16", dynamic=dynamic)
    assert result.passed, result.comparison.problems
    assert (tmp_path / "t5.onnx").is_file()
