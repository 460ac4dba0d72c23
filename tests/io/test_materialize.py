"""Loading half checkpoints into a model built on the meta device, and streaming conversion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from halfprec import convert, load, save
from halfprec.errors import CheckpointError
from halfprec.io.materialize import build_on_meta, parameters_on_meta
from halfprec.io.stream import convert_file
from halfprec.io.tensorfile import INDEX_NAME, TensorFile, TensorWriter
from support.tied_net import Net, trained

IDS = torch.randint(0, 10, (3, 5), generator=torch.Generator().manual_seed(1))


def test_parameters_on_meta_is_restored_and_keeps_buffers_real() -> None:
    before = nn.Module.register_parameter
    with parameters_on_meta():
        assert nn.Module.register_parameter is not before
        net = Net()
    assert nn.Module.register_parameter is before
    assert net.body.weight.is_meta and net.embed.weight is net.head.weight
    assert not net.offset.is_meta and not net.bn.running_var.is_meta
    assert not Net().body.weight.is_meta


def test_load_into_callable_equals_load_into_built_model(tmp_path: Path) -> None:
    path = save(convert(trained(), "bf16"), tmp_path / "net.safetensors")
    built = load(path, into=Net().eval())
    lazy = load(path, into=Net)
    assert not any(t.is_meta for t in lazy.state_dict().values())
    assert lazy.head.weight is lazy.embed.weight
    assert {n: t.dtype for n, t in lazy.state_dict().items()} == {
        n: t.dtype for n, t in built.state_dict().items()
    }
    assert lazy.body.weight.dtype == torch.bfloat16 and lazy.norm.weight.dtype == torch.float32
    with torch.no_grad():
        assert torch.equal(lazy(IDS), built(IDS))


def test_load_into_callable_refuses_another_architecture(tmp_path: Path) -> None:
    path = save(convert(trained(), "bf16"), tmp_path / "net.safetensors")
    with pytest.raises(CheckpointError, match="does not match Sequential: unexpected "):
        load(path, into=lambda: nn.Sequential(nn.Linear(8, 8)))
    with pytest.raises(CheckpointError, match="callable returning one"):
        build_on_meta(lambda: 3)  # type: ignore[arg-type, return-value]


def _sharded(tmp_path: Path, net: nn.Module) -> Path:
    state = {k: v.contiguous() for k, v in net.state_dict().items() if k != "head.weight"}
    names = sorted(state)
    shards = {"a.safetensors": names[: len(names) // 2], "b.safetensors": names[len(names) // 2 :]}
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(tmp_path / shard))
        weight_map.update({k: shard for k in keys})
    (tmp_path / INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return tmp_path


def test_streaming_conversion_matches_convert_and_save(tmp_path: Path) -> None:
    net = trained()
    with torch.no_grad():
        net.body.weight[0, 0] = 1e6  # beyond fp16: body must stay an fp32 island
    (tmp_path / "src").mkdir()
    src = _sharded(tmp_path / "src", net)
    out = tmp_path / "half.safetensors"
    report = convert_file(src, out, Net, "fp16")
    assert "body" in report.islands and "norm" in report.islands
    expected = convert(net, "fp16").state_dict()
    got = load_file(str(out))
    assert set(got) == set(expected) - {"head.weight"}
    for name, t in got.items():
        assert t.dtype == expected[name].dtype and torch.equal(t, expected[name]), name
    with safe_open(str(out), framework="pt") as f:
        meta = f.metadata()
    assert meta["dtype"] == "fp16" and "body" in json.loads(meta["keep_fp32"])
    with torch.no_grad():
        lazy, direct = load(out, into=Net)(IDS), convert(net, "fp16")(IDS)
    torch.testing.assert_close(lazy, direct, rtol=0, atol=0, equal_nan=True)


def test_tensor_file_reads_what_it_writes_and_checks_order(tmp_path: Path) -> None:
    specs = {"a": (torch.bfloat16, (2, 3)), "b": (torch.int64, ()), "c": (torch.bool, (0,))}
    a = torch.randn(2, 3).to(torch.bfloat16)
    with (tmp_path / "t.safetensors").open("wb") as f:
        writer = TensorWriter(f, specs, {"k": "v"})
        with pytest.raises(ValueError, match="does not match the header's next entry 'a'"):
            writer.write("b", torch.tensor(3))
        writer.write("a", a)
        writer.write("b", torch.tensor(3))
        writer.write("c", torch.zeros(0, dtype=torch.bool))
        writer.close()
    back = TensorFile(tmp_path / "t.safetensors")
    assert back.metadata == {"k": "v"} and back.names() == ["a", "b", "c"]
    assert torch.equal(back.get("a"), a) and back.get("b").item() == 3
    assert torch.equal(load_file(str(tmp_path / "t.safetensors"))["a"], a)
    (tmp_path / "bad.safetensors").write_bytes(b"\x01")
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        TensorFile(tmp_path / "bad.safetensors")
