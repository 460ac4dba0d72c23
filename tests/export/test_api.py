"""halfprec.export: torch.export (.pt2) and TorchScript artifacts and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import halfprec
from halfprec.export import ExportError, format_for_path, load_artifact
from halfprec.export.config import ExportConfig
from support.export_models import (
    DataDependent,
    FixedBatch,
    MixedOutputs,
    UnbindsImages,
    example_inputs,
    tiny,
)


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_pt2_reloads_equal_to_the_converted_model(tmp_path: Path, dtype: torch.dtype) -> None:
    model, batches = tiny(), example_inputs()
    result = halfprec.export(model, batches, tmp_path / "tiny.pt2", dtype)

    program = torch.export.load(tmp_path / "tiny.pt2")
    # the island is in the graph: layer_norm either reads a cast of the half activations
    # (hook islands) or takes them directly into its fp32-parameter kernel (mixed kernels)
    norm = next(n for n in program.graph.nodes if "layer_norm" in str(n.target))
    feeding = norm.args[0]
    cast_to_fp32 = "to" in str(feeding.target) and feeding.args[1] == torch.float32
    mixed_kernel = (
        feeding.meta["val"].dtype == dtype and norm.args[2].meta["val"].dtype == torch.float32
    )
    assert cast_to_fp32 or mixed_kernel
    state = program.state_dict
    assert state["l1.weight"].dtype == dtype  # half weights
    assert state["ln.weight"].dtype == torch.float32  # the LayerNorm island stays fp32
    half = halfprec.convert(model, dtype)
    for x in batches:  # 4 and 6 rows: the batch dimension is dynamic
        out = program.module()(x=x)
        want = half(x)
        assert out["logits"].dtype == torch.float32  # fp32 out, like the Python model
        assert torch.equal(out["logits"], want["logits"])
        assert torch.equal(out["hidden"], want["hidden"])
    assert result.passed
    assert result.python_max_abs == 0.0
    assert result.checked_batches == 2
    assert result.info.islands == {"ln": "norm island (LayerNorm)"}


def test_norm_islands_can_be_converted_too(tmp_path: Path) -> None:
    config = halfprec.Recipe(dtype="fp16", norm_islands=False)
    result = halfprec.export(tiny(), example_inputs(), tmp_path / "n.pt2", config)
    assert result.info.islands == {}
    assert torch.export.load(tmp_path / "n.pt2").state_dict["ln.weight"].dtype == torch.float16
    assert result.passed


def test_half_io_takes_and_returns_half(tmp_path: Path) -> None:
    halfprec.export(tiny(), example_inputs(), tmp_path / "io.pt2", "fp16", half_io=True)
    artifact = load_artifact(tmp_path / "io.pt2")
    assert artifact.info.io_dtype == "fp16"
    out = torch.export.load(tmp_path / "io.pt2").module()(x=torch.randn(3, 8).half())
    assert out["logits"].dtype == torch.float16
    assert artifact(torch.randn(3, 8))["logits"].dtype == torch.float16  # casts fp32 inputs


def test_static_export_checks_only_batches_of_its_shape(tmp_path: Path) -> None:
    result = halfprec.export(tiny(), example_inputs(), tmp_path / "s.pt2", "fp16", dynamic=False)
    assert result.passed
    assert (result.checked_batches, result.skipped_batches) == (1, 1)
    assert result.info.static_shapes == {"x": (4, 8)}
    with pytest.raises(Exception, match=r"(?i)shape|size|expected"):
        torch.export.load(tmp_path / "s.pt2").module()(x=torch.randn(6, 8))


def test_dynamic_shapes_that_fail_name_the_fix_and_leave_no_file(tmp_path: Path) -> None:
    model = FixedBatch().eval()
    batches = [torch.randn(4, 8)]
    with pytest.raises(ExportError, match="does not export with dynamic shapes.*--static"):
        halfprec.export(model, batches, tmp_path / "f.pt2", "fp16")
    assert _files(tmp_path) == []
    result = halfprec.export(model, batches, tmp_path / "f.pt2", "fp16", dynamic=False)
    assert result.passed and _files(tmp_path) == ["f.pt2"]


def test_a_dimension_the_model_fixes_is_exported_at_its_size_and_named(tmp_path: Path) -> None:
    # a VLM unbinds its image batch: the text batch stays dynamic, the image count is fixed
    batch = {"x": torch.randn(4, 8), "images": torch.randn(3, 8)}
    result = halfprec.export(UnbindsImages().eval(), [batch], tmp_path / "u.pt2", "fp16")
    assert result.passed and _files(tmp_path) == ["u.pt2"]
    assert any("images dimension 0 is fixed at 3" in n for n in result.notes), result.notes
    program = torch.export.load(tmp_path / "u.pt2").module()
    assert program(x=torch.randn(6, 8), images=torch.randn(3, 8)).shape == (6, 8)
    with pytest.raises(Exception, match=r"(?i)shape|size|expected"):
        program(x=torch.randn(4, 8), images=torch.randn(5, 8))


def test_a_fixed_dimension_that_differs_between_batches_is_refused(tmp_path: Path) -> None:
    batches = [
        {"x": torch.randn(4, 8), "images": torch.randn(3, 8)},
        {"x": torch.randn(4, 8), "images": torch.randn(2, 8)},
    ]
    with pytest.raises(ExportError, match="does not export with dynamic shapes.*images"):
        halfprec.export(UnbindsImages().eval(), batches, tmp_path / "u.pt2", "fp16")
    assert _files(tmp_path) == []


def test_a_known_upstream_export_limit_is_named_with_its_issue() -> None:
    from halfprec.export.capture import explain_failure

    frame = (
        'File "/venv/lib/python3.11/site-packages/transformers/time_series_utils.py", '
        "line 98, in distribution"
    )
    exc = RuntimeError(f"Could not guard on data-dependent expression u0\n  {frame}")
    message = explain_failure("torch.export", exc)
    assert "at transformers/time_series_utils.py:98" in message
    assert "https://github.com/pytorch/pytorch/issues/135061" in message
    other = RuntimeError(f"data-dependent u0\n  {frame.replace('time_series_utils', 'mine')}")
    assert "issues/" not in explain_failure("torch.export", other)


def test_an_export_failure_in_a_known_transformers_bug_says_it_is_outside_halfprec() -> None:
    from halfprec.export.capture import explain_failure

    path = "/venv/lib/site-packages/transformers/models/autoformer/modeling_autoformer.py"
    frame = f'File "{path}", line 517, in forward'
    exc = RuntimeError(f"shape '[2, 2, 16, 16]' is invalid for input of size 512\n  {frame}")
    message = explain_failure("torch.export", exc)
    assert message.startswith("torch.export failed: RuntimeError: shape '[2, 2, 16, 16]'")
    assert "(in transformers/models/autoformer/modeling_autoformer.py:517)" in message
    assert "a transformers bug outside halfprec, not reported upstream" in message
    assert "--static" not in message  # no advice that cannot help


def test_data_dependent_control_flow_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"depends on tensor values at .*export_models.py"):
        halfprec.export(DataDependent().eval(), [torch.randn(4, 8)], tmp_path / "d.pt2")
    assert _files(tmp_path) == []


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.load, torch 2.13
def test_torchscript_trace_holds_the_casts(tmp_path: Path) -> None:
    model, batches = tiny(), example_inputs()
    result = halfprec.export(model, batches, tmp_path / "tiny.ts", "fp16")
    assert result.info.format == "torchscript"
    scripted = torch.jit.load(str(tmp_path / "tiny.ts"))
    half = halfprec.convert(model, "fp16")
    for x in batches:
        out = scripted(x=x)
        assert out["logits"].dtype == torch.float32
        assert torch.equal(out["logits"], half(x)["logits"])
    assert scripted.l1.weight.dtype == torch.float16
    assert scripted.ln.weight.dtype == torch.float32
    assert result.passed and result.python_max_abs == 0.0


def test_torchscript_rejects_mixed_outputs_clearly(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"TorchScript cannot trace.*\(-o NAME\.pt2\)"):
        halfprec.export(MixedOutputs().eval(), [torch.randn(2, 8)], tmp_path / "m.ts")
    assert _files(tmp_path) == []
    # torch.export has no such limit
    assert halfprec.export(MixedOutputs().eval(), [torch.randn(2, 8)], tmp_path / "m.pt2").passed


def test_bad_requests_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"\*.pt2.*\*.onnx"):
        format_for_path(tmp_path / "model.bin")
    with pytest.raises(ValueError, match="opset must be 17 or newer"):
        ExportConfig(format="onnx", opset=13)
    with pytest.raises(ExportError, match=r"does not fit format onnx; name the file \*.onnx"):
        ExportConfig.for_path("m.pt2", "onnx")
    assert ExportConfig.for_path("m.pt", "torchscript").format == "torchscript"
    with pytest.raises(ExportError, match="pass the original fp32 model"):
        halfprec.export(halfprec.convert(tiny(), "fp16"), example_inputs(), tmp_path / "x.pt2")
    with pytest.raises(ExportError, match="not found"):
        load_artifact(tmp_path / "missing.pt2")
    (tmp_path / "junk.pt2").write_bytes(b"not a zip")
    with pytest.raises(ExportError, match="not a loadable torch.export file"):
        load_artifact(tmp_path / "junk.pt2")


def test_a_file_that_fails_its_check_does_not_replace_the_previous_one(tmp_path: Path) -> None:
    """write_artifact checks the temp file before the rename: a failing check (here, the
    reloaded file is refused) leaves the user's previous artifact as it was."""
    from halfprec.export.api import fp32_info, write_artifact
    from halfprec.export.capture import forward_params, named_inputs

    out = tmp_path / "tiny.pt2"
    result = halfprec.export(tiny(), example_inputs(), out, "fp16")
    before = out.read_bytes()
    model = tiny()
    named = [named_inputs(b, forward_params(model)) for b in example_inputs()]
    seen: list[Path] = []

    def refuse(tmp: Path) -> None:
        seen.append(tmp)
        assert load_artifact(tmp, format="exported-program").info.dtype == "fp32"
        raise ExportError(f"{tmp} does not fit this model's inputs")

    with pytest.raises(ExportError) as info:
        write_artifact(ExportConfig(), model, named, out, fp32_info(result.info), verify=refuse)
    assert out.read_bytes() == before and _files(tmp_path) == ["tiny.pt2"]
    assert seen and seen[0] != out
    assert str(info.value) == f"{out} does not fit this model's inputs"  # the user's path
