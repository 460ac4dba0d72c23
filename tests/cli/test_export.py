"""``halfprec export``: .pt2 and ONNX exports checked from the command line, bad names exit 2;
Hugging Face directories, with their KV cache (``--kv-cache``) or without."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from halfprec.export import load_artifact
from halfprec.io.specs import load_model
from support import SUPPORT
from support.hf_models import save
from support.kv_decode import decode, decode_seq2seq, onnx_runner, seq2seq_model

MODELS = str(SUPPORT / "export_models.py")


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.slow
def test_cli_export_then_check_artifact(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "tiny.pt2"
    proc = cli("export", f"{MODELS}:tiny", "-o", str(out), "--dtype", "fp16", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format"] == "exported-program" and data["passed"] is True
    assert data["python_max_abs"] == 0.0

    # the passing `check --artifact` path is covered by test_export_onnx.py
    strict = cli("check", f"{MODELS}:tiny", "--artifact", str(out), "--min-sqnr", "200")
    assert strict.returncode == 1
    assert "FAIL" in strict.stdout


@pytest.mark.slow
def test_cli_bad_output_name_exits_2(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = cli("export", f"{MODELS}:tiny", "-o", str(tmp_path / "tiny.bin"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "cannot tell the export format" in proc.stderr
    assert _files(tmp_path) == []


@pytest.mark.slow
def test_cli_onnx_export_and_check(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "tiny.onnx"
    proc = cli("export", f"{MODELS}:tiny", "-o", str(out), "--runs", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format"] == "onnx" and data["dtype"] == "fp16" and data["passed"]
    assert data["ort_casts"]["casts_in_file"] >= 4 and data["ort_latency"] is None

    ok = cli("check", f"{MODELS}:tiny", "--artifact", str(out), "--json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["passed"] is True and report["info"]["format"] == "onnx"


@pytest.mark.slow
def test_cli_unsupported_op_exits_2(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = cli("export", f"{MODELS}:custom", "-o", str(tmp_path / "c.onnx"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("halfprec: error: operator halfprec_tests.wobble")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return tmp_path_factory.mktemp("hf_export")


@pytest.mark.slow
def test_cli_kv_cache_onnx_decodes_like_fp32_in_onnxruntime(  # type: ignore[no-untyped-def]
    cli, hf_root: Path, tmp_path: Path
) -> None:
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    folder, out = save("gpt2", hf_root), tmp_path / "g.onnx"
    proc = cli("export", str(folder), "-o", str(out), "--kv-cache", "--runs", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] is True
    assert data["checked_batches"] == 4
    assert any("present_key_values" in n for n in data["notes"])
    assert load_artifact(out).info.kv_cache is True
    # check --artifact rebuilds the cache batches from the model's examples
    proc = cli("check", str(folder), "--artifact", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["passed"] is True and verdict["batches"] == 4
    model: Any = load_model(str(folder)).model.eval()
    assert 0 < decode(onnx_runner(out, model.config.num_hidden_layers), model).worst < 0.05
    # and through halfprec's own artifact, whose outputs come back nested by path
    assert 0 < decode(load_artifact(out), model).worst < 0.05


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--static"], "drop --static"),
        (["--format", "torchscript"], "*.pt2 or *.onnx"),
    ],
)
def test_cli_kv_cache_refuses_options_it_cannot_honour(  # type: ignore[no-untyped-def]
    cli, hf_root: Path, tmp_path: Path, extra: list[str], message: str
) -> None:
    suffix = ".ts" if "torchscript" in extra else ".pt2"
    out = tmp_path / f"g{suffix}"
    proc = cli("export", str(save("gpt2", hf_root)), "-o", str(out), "--kv-cache", *extra)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.slow
def test_cli_seq2seq_kv_cache_writes_two_files_that_decode_like_fp32(  # type: ignore[no-untyped-def]
    cli, hf_root: Path, tmp_path: Path
) -> None:
    folder, out = save("bart", hf_root), tmp_path / "b.pt2"
    proc = cli("export", str(folder), "-o", str(out), "--kv-cache")
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())  # the encoder file first, then the decoder's
    assert said.index(f"wrote {tmp_path / 'b.encoder.pt2'}") < said.index(f"wrote {out}")
    assert said.count("PASS") == 2
    encoder_file = tmp_path / "b.encoder.pt2"
    assert sorted(tmp_path.iterdir()) == [encoder_file, out]
    for path, batches in ((out, 3), (encoder_file, 2)):  # check --artifact takes either file
        proc = cli("check", str(folder), "--artifact", str(path), "--json")
        assert proc.returncode == 0, proc.stderr
        verdict = json.loads(proc.stdout)
        assert verdict["passed"] is True and verdict["batches"] == batches
    encode, step = load_artifact(encoder_file), load_artifact(out)
    assert encode.info.kv_cache and step.info.kv_cache
    assert step.info.inputs == (
        "decoder_input_ids",
        "encoder_hidden_states",
        "attention_mask",
        "past_key_values.0.key",
        "past_key_values.0.value",
        "cross_key_values.0.key",
        "cross_key_values.0.value",
    )
    assert step.info.outputs == ("logits", "present_key_values.0.key", "present_key_values.0.value")
    assert encode.info.outputs == (
        "encoder_hidden_states",
        "cross_key_values.0.key",
        "cross_key_values.0.value",
    )
    # the fp16 files decode 8 tokens like fp32 without a cache (T5, Whisper and BART ONNX:
    # benchmarks/kv_cache.py)
    model, batch = seq2seq_model("bart", hf_root)
    assert 0 < decode_seq2seq(encode, step, model, batch).worst < 0.05


def test_hf_export_cli_reports_the_cache_note(  # type: ignore[no-untyped-def]
    cli, hf_root: Path, tmp_path: Path
) -> None:
    path = save("gpt2", hf_root)
    out = tmp_path / "g.pt2"
    proc = cli("export", str(path), "-o", str(out), "--dtype", "fp16", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["notes"] == [
        "use_cache=False on a copy of the config: the file returns no KV cache"
    ]


@pytest.mark.slow
def test_cli_grouped_gemm_moe_onnx_with_timing_passes_and_its_timing_copy_exports_too(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path
) -> None:
    # OLMoE's experts dispatch through grouped_mm: the fp32 timing copy needs the dense
    # rewrite too (it used to fail after m.onnx was written, exit 2 with the file left)
    source = save("olmoe", tmp_path)
    out = tmp_path / "m.onnx"
    proc = cli("export", str(source), "-o", str(out), "--kv-cache", "--runs", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] and data["ort_latency"] is not None
    assert any("mixture-of-experts layer(s) exported densely" in n for n in data["notes"])


@pytest.mark.slow
def test_cli_onnx_of_a_weight_normalised_speech_encoder_times_with_the_default_runs(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path
) -> None:
    # Wav2Vec2's positional conv is weight-normalised (a torch parametrization): the fp32
    # timing copy cannot come from copy.copy, which torch refuses for such modules
    source = save("wav2vec2", tmp_path / "src")
    model = load_model(str(source)).model
    assert any(hasattr(m, "parametrizations") for m in model.modules())
    out = tmp_path / "m.onnx"
    proc = cli("export", str(source), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] and data["ort_latency"] is not None


@pytest.mark.slow  # ~40 s here: two exports of a tiny LLaVA, one through torch.onnx
@pytest.mark.parametrize("fmt", ["pt2", "onnx"])
def test_cli_exports_a_vision_language_model_with_its_image_count_fixed(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path, fmt: str
) -> None:
    # transformers' LLaVA unbinds its image features into a list: torch.export fixes the
    # image count (2 here); the text batch and everything else stay as the user asked
    from testbed.hf_processors import save as save_with_processor

    source = save_with_processor("llava", tmp_path / "src")
    out = tmp_path / f"m.{fmt}"
    proc = cli("export", str(source), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"], data
    assert any("pixel_values dimension 0 is fixed at 2" in n for n in data["notes"]), data
    artifact = load_artifact(out)
    batch = load_model(str(source)).example_inputs[0]
    assert artifact(batch)["logits"].shape[:2] == batch["input_ids"].shape


@pytest.mark.slow  # ~30 s here: an export of a tiny LLaVA-NeXT
def test_cli_exports_a_model_that_branches_on_image_sizes_with_them_fixed(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path
) -> None:
    # LLaVA-NeXT tiles each image by the values of image_sizes (any resolution): they are
    # exported as constants, as transformers' own exporter does, and the file checks them
    from testbed.hf_processors import save as save_with_processor

    source = save_with_processor("llava-next", tmp_path / "src")
    out = tmp_path / "m.pt2"
    proc = cli("export", str(source), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"], data
    loaded = load_model(str(source))
    batch = loaded.example_inputs[0]
    rows = [tuple(int(v) for v in row) for row in batch["image_sizes"].tolist()]
    assert any(f"image_sizes is fixed at {rows}" in n for n in data["notes"]), data
    artifact = load_artifact(out)
    assert artifact(batch)["logits"].shape[:2] == batch["input_ids"].shape
    # sizes the model itself runs (the same tiles): only the file's check refuses them
    other = {**batch, "image_sizes": batch["image_sizes"] + 1}
    loaded.model(**other)
    with pytest.raises(Exception, match="(?i)image_sizes must be|assertion failed"):
        artifact(other)


@pytest.mark.parametrize("name", ["mamba2", "jamba"])
def test_cli_kv_cache_of_a_state_space_model_exits_2_with_nothing_written(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path, name: str
) -> None:
    source = save(name, tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    proc = cli("export", str(source), "-o", str(out / "m.onnx"), "--kv-cache")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cache holds state-space (conv and SSM) states in layer(s) 0" in proc.stderr
    assert "https://github.com/huggingface/transformers/issues/36403" in proc.stderr
    assert _files(out) == []


def test_onnx_timing_and_cast_counts_that_fail_read_n_a_and_the_file_is_written(  # type: ignore[no-untyped-def]
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxscript")

    def fails(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected failure")

    api = importlib.import_module("halfprec.export.api")  # halfprec.export is a function too
    monkeypatch.setattr(api, "inspect_casts", fails)
    monkeypatch.setattr(api, "ort_latency", fails)
    out = tmp_path / "tiny.onnx"
    proc = cli("export", f"{MODELS}:tiny", "-o", str(out), "--runs", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] and data["ort_casts"] is None and data["ort_latency"] is None
    assert "onnxruntime Cast count: n/a (RuntimeError: injected failure)" in data["notes"]
    assert "onnxruntime latency: n/a (RuntimeError: injected failure)" in data["notes"]
    assert out.is_file()
