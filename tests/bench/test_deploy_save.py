"""deploy's choice written in its own form (:mod:`halfprec.bench.deploy_save`): a runtime's
file for a runtime choice, a checkpoint for a torch one, and a form that cannot hold the
choice refused with nothing written. Timings are injected, so the choice is known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from halfprec.bench.deploy_save import deploy_to, folder_problem, output_problem, save_deployed
from halfprec.bench.results import BenchConfig
from halfprec.bench.variants import Variant
from halfprec.dtypes import DeviceSupport
from halfprec.errors import HalfprecError

CONFIG = BenchConfig(
    warmup=1, runs=3, memory="none", skip_slower_than=None, race=None, probe_cache=False
)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).eval()


def _x() -> torch.Tensor:
    return torch.randn(8, 32, generator=torch.Generator().manual_seed(1))


def _favour(prefix: str) -> Any:
    """A timer under which every variant named ``prefix...`` is 10x faster than the rest."""

    def timer(fn: Any, variant: Variant) -> float:
        fn()
        return 0.001 if variant.name.startswith(prefix) else 0.01

    return timer


def test_an_openvino_choice_is_written_as_its_ir_and_refused_elsewhere(tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    ov = "openvino-fp32"  # fp32: computed on every CPU
    opts: dict[str, Any] = {"compile": False, "bench": CONFIG, "timer": _favour(ov)}
    done = deploy_to(
        tmp_path / "m.xml", _model(), _x(), recipe="bf16", runtimes=("openvino",), **opts
    )
    assert done.variant == ov and done.runtime == "openvino"
    assert (tmp_path / "m.xml").is_file() and (tmp_path / "m.bin").is_file()
    with pytest.raises(HalfprecError, match=r"give -o NAME\.xml"):
        save_deployed(done, tmp_path / "m.safetensors")
    assert not (tmp_path / "m.safetensors").exists()


def test_a_torch_choice_is_a_checkpoint_and_refused_as_a_runtime_file(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    opts: dict[str, Any] = {"compile": False, "bench": CONFIG, "timer": _favour("halfprec")}
    done = deploy_to(tmp_path / "m.safetensors", _model(), _x(), recipe="bf16", runtimes=(), **opts)
    assert done.variant == "halfprec-bf16"
    assert {t.dtype for t in load_file(str(tmp_path / "m.safetensors")).values()} == {
        torch.bfloat16
    }
    with pytest.raises(HalfprecError, match=r"NAME\.safetensors"):
        save_deployed(done, tmp_path / "m.xml")
    assert not (tmp_path / "m.xml").exists()


def test_output_problem_names_the_forms() -> None:
    assert output_problem("a.safetensors", ()) is None
    assert output_problem("folder", ()) is None
    assert output_problem("a.xml", None) is None
    assert output_problem("a.onnx", ("all",)) is None
    assert "give one of those" in (output_problem("a.pt", None) or "")
    assert "--runtimes openvino" in (output_problem("a.xml", ()) or "")
    assert "give -o NAME.xml" in (output_problem("a.safetensors", ("openvino",)) or "")
    assert "leave --runtimes out" in (output_problem("folder", ("all",)) or "")


def test_a_checkpoint_path_tries_no_runtime_by_default(tmp_path: Path) -> None:
    """``halfprec deploy -o NAME.safetensors`` tried OpenVINO's bf16 target by default on a
    CPU with AVX512-BF16, chose it, and only then refused the path ("give -o NAME.xml"):
    a cold BERT-base deploy exited 2 after minutes. A torch form tries no runtime unless
    asked, and is refused upfront where runtimes are named."""
    pytest.importorskip("openvino")
    opts: dict[str, Any] = {"compile": False, "bench": CONFIG, "timer": _favour("openvino")}
    done = deploy_to(tmp_path / "m.safetensors", _model(), _x(), recipe="bf16", **opts)
    assert done.runtime == "torch"
    assert not [r.name for r in done.report.results if r.variant.runtime]
    assert (tmp_path / "m.safetensors").is_file()


def test_a_compiled_choice_is_saved_as_the_module_it_compiled() -> None:
    from halfprec.bench.deploy_save import _uncompiled
    from halfprec.bench.variants import compile_for_device

    model = _model()
    assert _uncompiled(compile_for_device(model, "cpu")) is model  # compiling is lazy: no cost
    assert _uncompiled(model) is model


def test_an_fp32_choice_is_refused_as_a_half_folder(tmp_path: Path) -> None:
    opts: dict[str, Any] = {"compile": False, "bench": CONFIG, "timer": _favour("fp32")}
    done = deploy_to(tmp_path / "m.safetensors", _model(), _x(), recipe="bf16", runtimes=(), **opts)
    assert done.variant == "fp32"
    with pytest.raises(HalfprecError, match="deploy chose fp32 .* give -o NAME.safetensors"):
        save_deployed(done, tmp_path / "folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]


def _support(fast: bool) -> DeviceSupport:
    """A CPU's row of the device table: AVX512-BF16 and AMX (``fast``), or a Zen 3."""
    features = ("amx_bf16", "amx_fp16", "avx512_bf16") if fast else ()
    return DeviceSupport("cpu", "a CPU", fast, fast, True, True, features)


def test_a_half_folder_is_refused_before_any_timing_where_no_half_dtype_is_fast(
    tmp_path: Path,
) -> None:
    """``halfprec deploy DIR -o FOLDER`` on a Zen 3 (no fast fp16 or bf16) timed every
    candidate, kept fp32, and only then refused the folder: the device table says so
    before anything is called. Where half kernels are fast, a half variant may win."""
    calls: list[int] = []
    model = _model()
    model.register_forward_hook(lambda *_: calls.append(1))
    folder = tmp_path / "folder"
    opts: dict[str, Any] = {"compile": False, "bench": CONFIG, "timer": _favour("halfprec")}
    with pytest.raises(HalfprecError, match="has no fast fp16 or bf16 kernels, so deploy would"):
        deploy_to(folder, model, _x(), runtimes=(), support=_support(False), **opts)
    assert calls == [] and not folder.exists()
    assert folder_problem(folder, _support(True), [torch.bfloat16]) is None
    assert folder_problem(tmp_path / "m.safetensors", _support(False), [torch.bfloat16]) is None
