"""Hugging Face save_pretrained directories through `halfprec export`, checked against fp32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from halfprec.errors import clip
from halfprec.export import ExportError, export
from halfprec.export.capture import explain_failure
from halfprec.export.hf import static_fp16_clamps, without_cache
from halfprec.io.specs import load_model
from halfprec.modules import first_line
from support.hf_models import save

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf")


def _export(root: Path, name: str, suffix: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    loaded = load_model(str(save(name, root)))
    config = loaded.model.config
    result = export(
        loaded.model, loaded.example_inputs, tmp_path / f"{name}{suffix}", "fp16", runs=0
    )
    assert config.use_cache is True  # the caller's model keeps its config
    return result


@pytest.mark.slow
# llama's .pt2 and gpt2's ONNX export are checked with --kv-cache in test_export_kv.py
@pytest.mark.parametrize("name", ["gpt2", "t5", "bart", "whisper"])
def test_hf_directory_exports_to_pt2_and_matches_fp32(
    name: str, hf_root: Path, tmp_path: Path
) -> None:
    result = _export(hf_root, name, ".pt2", tmp_path)
    assert result.passed, result.comparison.problems
    assert result.info.dtype == "fp16"
    assert any("use_cache=False" in n for n in result.notes)
    assert "logits" in result.info.outputs
    assert all("past_key_values" not in o for o in result.info.outputs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bart", "t5"])
def test_hf_directory_exports_to_onnx_and_matches_fp32(
    name: str, hf_root: Path, tmp_path: Path
) -> None:
    pytest.importorskip("onnxscript")
    result = _export(hf_root, name, ".onnx", tmp_path)
    assert result.passed, result.comparison.problems
    assert result.to_json()["notes"]


def test_bart_clamp_branch_is_rewritten_on_the_copy_only(hf_root: Path) -> None:
    import transformers as tf

    model = tf.BartForConditionalGeneration.from_pretrained(str(save("bart", hf_root))).eval()
    copy_, changed = without_cache(model)
    assert changed and copy_ is not model
    assert copy_.model.encoder.layers[0].fc1.weight is model.model.encoder.layers[0].fc1.weight
    assert model.config.use_cache is True and copy_.config.use_cache is False
    assert static_fp16_clamps(copy_) == 1  # the one encoder layer's clamp
    assert "forward" not in model.model.encoder.layers[0].__dict__
    ids = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(input_ids=ids, decoder_input_ids=ids[:, :3]).logits
        got = copy_.half()(input_ids=ids, decoder_input_ids=ids[:, :3]).logits
    assert torch.allclose(got.float(), expected, atol=0.05)
    # overflow in a layer output is clamped exactly as the original branch does
    layer = copy_.model.encoder.layers[0]
    big = torch.full((1, 2, 32), 60000.0, dtype=torch.float16)
    with torch.no_grad():
        out = layer(big, attention_mask=None)
    assert torch.isfinite(out).all()


def test_unknown_output_type_names_use_cache() -> None:
    exc = RuntimeError(
        "Found <class 'transformers.cache_utils.DynamicCache'> in output, which is not a "
        "known type. If this type holds tensors, you need to register a pytree for it. See "
        "https://github.com/pytorch/functorch/issues/475 for a brief explanation why. If you"
    )
    message = explain_failure("torch.export", exc)
    assert "DynamicCache" in message and "config.use_cache=False" in message


def test_exporter_failure_gives_the_root_cause_without_ansi_or_cut_words() -> None:
    root = ValueError("Cannot view a tensor " + "with a long shape " * 30 + "\nsecond line")
    try:
        try:
            raise root
        except ValueError as inner:
            raise RuntimeError("Failed. \x1b[96mThis is step 2/3\x1b[0m of exporting") from inner
    except RuntimeError as outer:
        message = explain_failure("torch.onnx.export", outer)
    assert message.startswith("torch.onnx.export failed: ValueError: Cannot view a tensor")
    assert "\x1b" not in message and "second line" not in message
    assert "shape..." in message  # clipped after a whole word


def test_clip_and_first_line_never_cut_words() -> None:
    assert clip("alpha beta gamma", 12) == "alpha..."
    assert clip("short", 12) == "short"
    assert first_line(ValueError("\x1b[96mred\x1b[0m text\nmore")) == "ValueError: red text"
    assert first_line(KeyError()) == "KeyError"


@pytest.mark.slow  # torch.export tries LED twice (dynamic, then static): ~40 s
def test_value_dependent_control_flow_names_the_model_s_own_file_and_line(tmp_path: Path) -> None:
    import transformers

    torch.manual_seed(0)
    config = transformers.LEDConfig(
        encoder_layers=1, decoder_layers=1, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
        encoder_attention_heads=2, decoder_attention_heads=2, vocab_size=128,
        attention_window=[8], max_encoder_position_embeddings=64,
        max_decoder_position_embeddings=64,
    )  # fmt: skip
    model = transformers.LEDForConditionalGeneration(config).eval()
    batch = {"input_ids": torch.randint(0, 128, (1, 16)), "decoder_input_ids": torch.ones(1, 4)}
    batch["decoder_input_ids"] = batch["decoder_input_ids"].long()
    with pytest.raises(ExportError) as caught:
        export(model, batch, tmp_path / "led.pt2", "fp16")
    message = str(caught.value)
    assert "control flow that depends on tensor values at " in message
    assert "transformers/models/led/modeling_led.py:" in message and "<string>" not in message
    assert not list(tmp_path.iterdir())


def test_shared_copy_of_parametrized_modules_shares_weights_and_leaves_the_original() -> None:
    from torch import nn
    from torch.nn.utils import parametrizations, parametrize

    from halfprec.export.hf import shared_copy

    class Doubled(nn.Module):
        def forward(self, w: torch.Tensor) -> torch.Tensor:
            return 2 * w

    torch.manual_seed(0)
    model = nn.Sequential(
        parametrizations.weight_norm(nn.Conv1d(4, 4, 3, padding=1), dim=2),
        parametrizations.spectral_norm(nn.Linear(8, 8)),
        nn.Linear(8, 8),
    ).eval()
    parametrize.register_parametrization(model[2], "weight", Doubled())
    x = torch.randn(2, 4, 8)
    with torch.no_grad():
        want = model(x)
        copied = shared_copy(model)
        assert torch.equal(copied(x), want)
    assert all(a is b for a, b in zip(copied.parameters(), model.parameters(), strict=True))
    copied[2].forward = lambda t: t  # type: ignore[method-assign]  # a rewrite on the copy
    with torch.no_grad():
        assert torch.equal(model(x), want)


@pytest.mark.slow
def test_a_weight_normalised_conv_exports_to_pt2_and_loads(tmp_path: Path) -> None:
    # torch.export keeps weight_norm as aten._weight_norm: a pure tensor op, allow-listed
    from torch import nn
    from torch.nn.utils import parametrizations

    from halfprec.export import load_artifact

    torch.manual_seed(0)
    conv = parametrizations.weight_norm(nn.Conv1d(4, 4, 3, padding=1), dim=2)
    model = nn.Sequential(conv, nn.GELU()).eval()
    batch = (torch.randn(2, 4, 16),)
    result = export(model, [batch], tmp_path / "w.pt2", "fp16", runs=0)
    assert result.passed, result.comparison.problems
    assert load_artifact(tmp_path / "w.pt2") is not None
