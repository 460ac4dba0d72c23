"""The onnxruntime target end to end on a small real model: built from halfprec's ONNX
export, run at another batch size, saved, and refusing inputs and graphs in one line."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn

from halfprec import compare
from halfprec.batch import call
from halfprec.errors import InputsError
from halfprec.export import ExportError
from halfprec.runtimes import RuntimeModule
from halfprec.tree import flatten

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from halfprec.runtimes import ort  # noqa: E402  (after the skips: it needs onnx)


class Tagger(nn.Module):
    """Token ids and features in, a dict out; ``mask`` is taken and never read."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 3)

    def forward(
        self, ids: torch.Tensor, x: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        hidden = self.embed(ids) + x
        return {"scores": self.proj(hidden), "hidden": hidden}


class Int8Matmul(nn.Module):
    """A product of int8 tensors: torch computes it, onnxruntime refuses the graph (its
    MatMul takes no int8)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = x.to(torch.int8)
        return (q @ q.T).float()


def _batch(rows: int, seed: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "ids": torch.randint(0, 10, (rows, 5), generator=gen),
        "x": torch.randn(rows, 5, 8, generator=gen),
        "mask": torch.ones(rows, 5, dtype=torch.long),
    }


@pytest.fixture(scope="module")
def built() -> RuntimeModule:
    """One export for the file (~2 s on 2 busy cores, after torch.onnx's first import)."""
    return ort.build(Tagger().eval(), _batch(4), threads=1)


def test_it_runs_like_the_model_at_another_batch_size(built: RuntimeModule) -> None:
    assert (built.runtime, built.precision) == ("onnxruntime", "fp32")
    assert built.input_names == ("ids", "x", "mask")
    assert built.output_names == ("scores", "hidden")
    model, batch = Tagger().eval(), _batch(3, seed=2)  # other values, 3 rows, not 4
    got = call(built, batch)
    with torch.no_grad():
        want = call(model, batch)
    assert list(got) == ["scores", "hidden"] and got["scores"].shape == (3, 5, 3)
    assert compare(model, built, batch).passed  # halfprec's own check, every element
    # the mask the model does not read is taken and changes nothing
    other = call(built, {**batch, "mask": torch.zeros(3, 5, dtype=torch.long)})
    assert torch.equal(other["scores"], got["scores"])
    assert torch.allclose(got["hidden"], want["hidden"])


def test_the_saved_file_runs_in_onnxruntime_with_the_same_outputs(
    built: RuntimeModule, tmp_path: Path
) -> None:
    import onnxruntime

    written = built.save(tmp_path / "tagger.onnx")
    assert written == tmp_path / "tagger.onnx"
    session = onnxruntime.InferenceSession(str(written), providers=["CPUExecutionProvider"])
    batch = _batch(2, seed=3)
    feeds = {i.name: batch[i.name].numpy() for i in session.get_inputs()}
    outs = session.run(list(built.output_names), feeds)
    got = flatten(built(**batch))
    for name, value in zip(built.output_names, outs, strict=True):
        assert torch.equal(torch.from_numpy(value), got[name])
    with pytest.raises(ValueError, match=r"saved as NAME\.onnx, got 'tagger\.xml'"):
        built.save(tmp_path / "tagger.xml")
    built.save(tmp_path / "new" / "tagger.onnx")  # missing folders are made
    assert (tmp_path / "new" / "tagger.onnx").read_bytes() == written.read_bytes()


def test_a_missing_input_is_named_in_one_line(built: RuntimeModule) -> None:
    batch = _batch(2)
    del batch["mask"]
    with pytest.raises(
        InputsError, match=r"built for inputs \['ids', 'x', 'mask'\], got \['ids', 'x'\]"
    ):
        built(**batch)


_X_TAKES = r"float32 \[(\w+), 5, 8\]"  # the batch size is the graph's one named size


@pytest.mark.parametrize(
    ("name", "value", "given", "takes"),
    [
        ("ids", torch.zeros(2, 5, dtype=torch.int32), r"int32 \[2, 5\]", r"int64 \[(\w+), 5\]"),
        ("x", torch.zeros(2, 5, 8, dtype=torch.float64), r"float64 \[2, 5, 8\]", _X_TAKES),
        ("x", torch.zeros(2, 5, 8, dtype=torch.bfloat16), r"bfloat16 \[2, 5, 8\]", _X_TAKES),
        ("x", torch.zeros(2, 5, 9), r"float32 \[2, 5, 9\]", _X_TAKES),
        ("x", torch.zeros(2, 8), r"float32 \[2, 8\]", _X_TAKES),
    ],
)
def test_an_input_of_another_dtype_or_shape_is_named_in_one_line(
    built: RuntimeModule, name: str, value: torch.Tensor, given: str, takes: str
) -> None:
    with pytest.raises(InputsError) as caught:
        built(**{**_batch(2), name: value})
    want = (
        rf"input '{name}' is {given}, the ONNX model takes {takes} \(\1: any size\); "
        rf"give '{name}' in that dtype and shape"
    )
    assert re.fullmatch(want, str(caught.value)), str(caught.value)


def test_a_graph_onnxruntime_refuses_is_one_line_and_leaves_no_folder(
    built: RuntimeModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # after one export (``built``): torch's own lazily made temp paths are set by then and
    # stay in the real temp folder; only the target's export goes here
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ExportError) as caught:
        ort.build(Int8Matmul().eval(), torch.randn(2, 4) * 4, threads=1)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("onnxruntime cannot load the ONNX export of Int8Matmul (")
    assert "tensor(int8)" in text and "MatMul" in text  # onnxruntime's own reason, without
    assert "[ONNXRuntimeError]" not in text and "halfprec-ort-" not in text  # frame, temp path
    assert text.endswith("); run this model with torch, or replace what onnxruntime refuses")
    assert list(tmp_path.iterdir()) == []
