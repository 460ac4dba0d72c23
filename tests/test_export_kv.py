"""Decoder-only Hugging Face LMs exported with their KV cache as tensors (``--kv-cache``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from halfprec.export import ExportError, export, load_artifact
from halfprec.export.kv_cache import WithPast
from halfprec.io.specs import load_model
from hf_models import save

pytest.importorskip("transformers")

STEPS = 8


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf_kv")


def _empty_past(model: Any, dtype: torch.dtype = torch.float32) -> tuple[dict[str, Any], ...]:
    """The past of a prompt: zero positions, shaped from a one-token run of the model."""
    with torch.no_grad():
        past = WithPast(model).prompt_cache(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1))
    return tuple({k: t[:, :, :0].to(dtype) for k, t in p.items()} for p in past)


def _decode_against_fp32(run: Any, model: Any, prompt: torch.Tensor) -> float:
    """Greedy-decode STEPS tokens through ``run``, feeding its cache back; compare each
    step's logits with the fp32 model run on the whole sequence without a cache.

    Returns the largest logit difference; asserts the argmax agrees wherever fp32's margin
    between its two best tokens is wider than twice that step's difference.
    """
    past, ids, mask, seq = _empty_past(model), prompt, torch.ones_like(prompt), prompt
    worst = 0.0
    for _ in range(STEPS):
        out = run({"input_ids": ids, "attention_mask": mask, "past_key_values": past})
        logits = out["logits"][:, -1].float()
        with torch.no_grad():
            full = model(input_ids=seq, attention_mask=torch.ones_like(seq)).logits[:, -1]
        diff = float((logits - full).abs().max())
        top2 = full.topk(2).values[0]
        if float(top2[0] - top2[1]) > 2 * diff:
            assert int(logits.argmax()) == int(full.argmax())
        worst = max(worst, diff)
        nxt = logits.argmax(-1, keepdim=True)
        past, ids = out["present_key_values"], nxt
        mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
        seq = torch.cat([seq, nxt], dim=1)
    assert seq.shape[1] == prompt.shape[1] + STEPS
    return worst


def test_fp32_wrapper_generates_what_transformers_generates(hf_root: Path) -> None:
    model: Any = load_model(str(save("llama", hf_root))).model.eval()
    prompt = torch.arange(3, 9).unsqueeze(0)
    wrapper = WithPast(model)
    past, ids, mask, tokens = _empty_past(model), prompt, torch.ones_like(prompt), []
    with torch.no_grad():
        for _ in range(STEPS):
            out = wrapper(ids, mask, past)
            ids = out["logits"][:, -1:].argmax(-1)
            tokens.append(int(ids))
            past = out["present_key_values"]
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
        want = model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS, do_sample=False
        )
    assert tokens == want[0, prompt.shape[1] :].tolist()


@pytest.mark.slow
def test_kv_cache_export_decodes_like_fp32(hf_root: Path, tmp_path: Path) -> None:
    loaded = load_model(str(save("llama", hf_root)))
    model: Any = loaded.model
    result = export(model, loaded.example_inputs, tmp_path / "llama.pt2", "fp16", kv_cache=True)
    assert result.passed, result.comparison.problems
    assert result.checked_batches == 3  # split prompt, one-token step, empty past
    layers = model.config.num_hidden_layers
    assert result.info.inputs == (
        "input_ids",
        "attention_mask",
        *(f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")),
    )
    assert result.info.outputs[0] == "logits"
    assert "present_key_values.0.value" in result.info.outputs
    # the caller's model is untouched: fp32, its config keeps the cache on
    assert model.config.use_cache is True
    assert all(p.dtype == torch.float32 for p in model.parameters())
    artifact = load_artifact(result.path)
    worst = _decode_against_fp32(artifact, model, torch.arange(5, 11).unsqueeze(0))
    assert 0 < worst < 0.05  # fp16 is not fp32, and stays close over the whole decode


@pytest.mark.slow
def test_kv_cache_onnx_runs_a_decode_loop_in_onnxruntime(hf_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    loaded = load_model(str(save("gpt2", hf_root)))
    result = export(
        loaded.model, loaded.example_inputs, tmp_path / "g.onnx", "fp16", kv_cache=True, runs=0
    )
    assert result.passed, result.comparison.problems
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    model: Any = loaded.model
    layers = model.config.num_hidden_layers

    def run(batch: dict[str, Any]) -> dict[str, Any]:
        feeds = {"input_ids": batch["input_ids"].numpy()}
        feeds["attention_mask"] = batch["attention_mask"].numpy()
        for i, layer in enumerate(batch["past_key_values"]):
            for kv, t in layer.items():
                feeds[f"past_key_values.{i}.{kv}"] = t.float().numpy()
        got = dict(zip(names, session.run(None, feeds), strict=True))
        present = tuple(
            {kv: torch.from_numpy(got[f"present_key_values.{i}.{kv}"]) for kv in ("key", "value")}
            for i in range(layers)
        )
        return {"logits": torch.from_numpy(got["logits"]), "present_key_values": present}

    worst = _decode_against_fp32(run, model, torch.arange(5, 11).unsqueeze(0))
    assert 0 < worst < 0.05


@pytest.mark.slow
def test_cli_kv_cache_file_decodes_like_fp32(cli, hf_root: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "g.pt2"
    folder = save("gpt2", hf_root)
    proc = cli("export", str(folder), "-o", str(out), "--kv-cache", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] is True
    assert data["checked_batches"] == 3
    assert any("present_key_values" in n for n in data["notes"])
    artifact = load_artifact(out)
    assert "past_key_values.0.key" in artifact.info.inputs
    model = load_model(str(folder)).model.eval()
    assert 0 < _decode_against_fp32(artifact, model, torch.arange(5, 11).unsqueeze(0)) < 0.05


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


def test_kv_cache_refuses_encoder_decoders_and_short_prompts(hf_root: Path, tmp_path: Path) -> None:
    t5 = load_model(str(save("t5", hf_root)))
    with pytest.raises(ExportError, match="encoder-decoder: export it without --kv-cache"):
        export(t5.model, t5.example_inputs, tmp_path / "t5.pt2", kv_cache=True)
    gpt2 = load_model(str(save("gpt2", hf_root))).model
    short = {"input_ids": torch.tensor([[1, 2, 3]]), "attention_mask": torch.ones(1, 3)}
    with pytest.raises(ExportError, match="at least 4 tokens, got 3"):
        export(gpt2, short, tmp_path / "g.pt2", kv_cache=True)
    with pytest.raises(ExportError, match="is not one"):
        export(torch.nn.Linear(4, 4), torch.randn(2, 4), tmp_path / "l.pt2", kv_cache=True)
    assert not list(tmp_path.iterdir())
