"""The OpenVINO IR that ``RuntimeModule.save`` writes takes the model's input names and
gives the output names halfprec reports, so it is fed (a tokenizer's output included) and
read by name with OpenVINO's own API."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from halfprec.batch import call
from halfprec.runtimes import RuntimeModule, build_runtime
from halfprec.tree import flatten

ov = pytest.importorskip("openvino")


class Echo(nn.Module):
    """Two outputs on one tensor and an output that is an input: each needs a tensor of
    its own in the graph to keep its own name."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, Any]:
        h = self.proj(x)
        return {"hidden": h, "same": h, "seen": mask, "scores": (h * mask).sum(-1)}


def _echo(rows: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(rows)
    return {"x": torch.randn(rows, 6, generator=gen), "mask": torch.ones(rows, 6)}


def _hf(name: str) -> Callable[[int], tuple[nn.Module, dict[str, torch.Tensor]]]:
    """A tiny Hugging Face model and a batch of ``rows`` rows of its usual inputs."""

    def make(rows: int) -> tuple[nn.Module, dict[str, torch.Tensor]]:
        import transformers as tf

        from halfprec.io.zoo import token_batch
        from support.hf_models import build

        small = {"hidden_size": 32, "num_attention_heads": 2, "vocab_size": 128}
        torch.manual_seed(0)
        if name == "bert":
            cfg = tf.BertConfig(**small, num_hidden_layers=1, intermediate_size=64)
            model = tf.BertModel(cfg).eval()
        elif name == "distilbert":
            cfg = tf.DistilBertConfig(vocab_size=128, dim=32, n_layers=1, n_heads=2, hidden_dim=64)
            model = tf.DistilBertModel(cfg).eval()
        else:
            model = build(name)
        if name == "vit":
            gen = torch.Generator().manual_seed(rows)
            return model, {"pixel_values": torch.randn(rows, 3, 32, 32, generator=gen)}
        batch = token_batch(128, rows, 8, seed=rows)
        if name == "bert":  # a BERT tokenizer's whole output
            batch["token_type_ids"] = (torch.arange(8) >= 4).long().expand(rows, 8)
        return model, batch

    return make


def _ir_names(ports: Any) -> list[set[str]]:
    return [set(p.get_names()) for p in ports]


def _check_by_name(
    built: RuntimeModule, model: nn.Module, batch: dict[str, Any], path: Path
) -> None:
    """The IR at ``path``, read by a plain ``Core``: its ports carry exactly the names
    halfprec reports, and fed ``batch`` by name it gives ``model``'s outputs by name."""
    core = ov.Core()
    ir = core.read_model(str(path))
    assert _ir_names(ir.inputs) == [{n} for n in built.input_names]
    assert _ir_names(ir.outputs) == [{n} for n in built.output_names]
    compiled = core.compile_model(ir, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    result = compiled.create_infer_request().infer({k: v.numpy() for k, v in batch.items()})
    with torch.no_grad():
        want = flatten(call(model, batch))
    assert list(want) == list(built.output_names)
    for name, value in want.items():
        got = torch.from_numpy(result[compiled.output(name)])
        torch.testing.assert_close(got, value, rtol=1e-4, atol=1e-5)


def test_echo_outputs_keep_their_names_when_they_share_a_tensor(tmp_path: Path) -> None:
    model = Echo().eval()
    built = build_runtime(model, "openvino", torch.float32, _echo(4))
    assert built.output_names == ("hidden", "same", "seen", "scores")
    _check_by_name(built, model, _echo(3), built.save(tmp_path / "echo.xml"))
    # the module itself still returns the model's structure
    assert set(built(**_echo(2))) == {"hidden", "same", "seen", "scores"}


@pytest.mark.slow  # transformers models: a few seconds each to build and convert
@pytest.mark.parametrize("name", ["bert", "distilbert", "gpt2", "vit"])
def test_hugging_face_models_are_fed_and_read_by_name(tmp_path: Path, name: str) -> None:
    model, example = _hf(name)(2)
    built = build_runtime(model, "openvino", torch.float32, example)
    assert built.input_names == tuple(example)  # in forward's order: what a tokenizer names
    _, other = _hf(name)(3)
    _check_by_name(built, model, other, built.save(tmp_path / f"{name}.xml"))


@pytest.mark.slow  # a tiny BERT folder and its WordPiece tokenizer
def test_a_tokenizers_whole_output_feeds_the_ir(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from halfprec.io.specs import load_model
    from support.sentence_folder import sentence_folder

    folder = sentence_folder(tmp_path / "st")
    loaded = load_model(str(folder))
    model, example = loaded.model.eval(), loaded.example_inputs[0]
    built = build_runtime(model, "openvino", torch.float32, example)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    enc = dict(tokenizer(["the cat sat on a mat", "a dog ran"], padding=True, return_tensors="pt"))
    assert set(enc) == {"input_ids", "token_type_ids", "attention_mask"}
    assert set(built.input_names) == set(enc)
    _check_by_name(built, model, enc, built.save(tmp_path / "st.xml"))


class Counted(Echo):
    """Echo counting its forward calls."""

    calls = 0

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, Any]:
        type(self).calls += 1
        return super().forward(x, mask)


def test_the_build_calls_the_model_once_and_takes_its_outputs_from_that_call() -> None:
    # torch.jit.trace's check_trace traced and ran the model twice more, and the output
    # template was one more call: four calls of a model whose call is a BERT's second
    model = Counted().eval()
    Counted.calls = 0
    built = build_runtime(model, "openvino", torch.float32, _echo(4))
    assert Counted.calls == 1
    assert built.output_names == ("hidden", "same", "seen", "scores")
    with torch.no_grad():
        want = model(**_echo(3))
    got = built(**_echo(3))
    assert set(got) == set(want)
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-5)


def test_a_model_openvino_cannot_convert_leaves_the_callers_logging_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenVINO's ``convert_model`` sets the root logger to ERROR, adds a filter and (where
    the root has no handler, as in a plain script) a handler of its own, and puts them back
    only when it succeeds. A model it cannot convert is a failed row of a bench or deploy
    run, after which the caller's own warnings must still show."""
    from halfprec.runtimes.ov import ConversionError
    from support.export_models import custom, example_inputs

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # a plain script: no handler on the root
    monkeypatch.setattr(root, "filters", [])
    monkeypatch.setattr(root, "level", logging.WARNING)
    with pytest.raises(ConversionError, match="halfprec_tests"):
        build_runtime(custom(), "openvino", torch.float32, example_inputs()[0])
    assert (root.level, root.filters, root.handlers) == (logging.WARNING, [], [])
