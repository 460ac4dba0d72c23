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
from halfprec.convert import conversion_report
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


def _mapped_from(t: torch.Tensor, path: Path) -> bool:
    """True when ``t``'s memory lies in a mapping of the file ``path`` (/proc/self/maps)."""
    ptr = t.data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if low <= ptr < high:
            return len(fields) == 6 and fields[5].strip() == str(path.resolve())
    return False


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads Linux /proc")
def test_load_into_callable_maps_the_file_instead_of_copying_it(tmp_path: Path) -> None:
    path = save(convert(trained(), "bf16"), tmp_path / "net.safetensors")
    lazy = load(path, into=Net)
    # kept as in the file: views of its pages, as from_pretrained loads (no read, no copy)
    assert lazy.body.weight.dtype == torch.bfloat16 and _mapped_from(lazy.body.weight, path)
    assert _mapped_from(lazy.embed.weight, path) and _mapped_from(lazy.bn.running_mean, path)
    assert not _mapped_from(lazy.offset, path)  # computed in __init__, never saved
    before = TensorFile(path).get("body.weight").clone()
    with torch.no_grad():
        lazy.body.weight.add_(1)  # copy on write: the file is not changed
    assert torch.equal(TensorFile(path).get("body.weight"), before)
    save(convert(Net(), "bf16"), path)  # replaced by rename: the loaded model is intact
    assert torch.equal(lazy.body.weight.detach(), before + 1)
    # cast on load (a plain bf16 file into the fp32 model): read and cast, not mapped
    plain = tmp_path / "plain.safetensors"
    state = trained().state_dict()
    half = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()}
    save_file({k: v for k, v in half.items() if k != "head.weight"}, plain)
    fp32 = load(plain, into=Net)
    assert fp32.body.weight.dtype == torch.float32 and not _mapped_from(fp32.body.weight, plain)
    assert torch.equal(fp32.body.weight, state["body.weight"].to(torch.bfloat16).float())


def test_mapped_tensors_equal_read_ones_and_misaligned_ones_are_read(tmp_path: Path) -> None:
    specs = {
        "odd": (torch.bfloat16, (3,)),
        "f": (torch.float32, (2, 2)),
        "e": (torch.float32, (0,)),
    }
    values = {
        "odd": torch.randn(3).to(torch.bfloat16),
        "f": torch.randn(2, 2),
        "e": torch.zeros(0),
    }
    with (tmp_path / "t.safetensors").open("wb") as f:
        writer = TensorWriter(f, specs)
        for name, t in values.items():
            writer.write(name, t)
        writer.close()
    source = TensorFile(tmp_path / "t.safetensors")
    for name, t in values.items():
        got = source.mapped(name)
        assert got.dtype == t.dtype and torch.equal(got, t), name
    # "f" starts 6 bytes after "odd", not on a 4-byte boundary: read into aligned memory
    assert source.mapped("f").data_ptr() % 4 == 0
    assert not _mapped_from(source.mapped("f"), tmp_path / "t.safetensors")
    assert _mapped_from(source.mapped("odd"), tmp_path / "t.safetensors")


def test_building_on_meta_skips_initialising_parameters_but_not_real_buffers() -> None:
    class Init(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 3)
            nn.init.trunc_normal_(self.lin.weight, std=0.02)
            nn.init.zeros_(self.lin.bias)
            self.register_buffer("scale", torch.ones(3))
            self.scale.mul_(2).add_(1)  # a real buffer: its in-place init must still run

    net = build_on_meta(Init)
    assert net.lin.weight.is_meta and net.lin.weight.shape == (3, 4)
    assert net.lin.bias.is_meta and net.lin.weight.requires_grad
    assert torch.equal(net.scale, torch.full((3,), 3.0))


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads Linux /proc")
def test_load_into_callable_maps_each_shard_of_a_sharded_checkpoint(tmp_path: Path) -> None:
    net = trained()
    folder = _sharded(tmp_path, net)
    lazy = load(folder, into=Net)
    shards = {folder / "a.safetensors", folder / "b.safetensors"}
    for name, t in lazy.state_dict().items():
        if name == "offset":
            continue
        assert torch.equal(t, net.state_dict()[name]), name
        assert any(_mapped_from(t, shard) for shard in shards), name
    with torch.no_grad():
        torch.testing.assert_close(lazy(IDS), net(IDS), rtol=0, atol=0)


def test_meta_paths_give_the_reason_of_the_cpu_the_weights_land_on(tmp_path: Path) -> None:
    net = trained()
    on_cpu = conversion_report(convert(net, "bf16"))
    path = save(convert(net, "bf16"), tmp_path / "net.safetensors")
    lazy, built = conversion_report(load(path, into=Net)), conversion_report(load(path, into=Net()))
    assert lazy is not None and built is not None and on_cpu is not None
    assert lazy.reason == built.reason == on_cpu.reason  # not the meta device's "fast kernels"
    (tmp_path / "src").mkdir()
    src = _sharded(tmp_path / "src", net)
    assert convert_file(src, tmp_path / "a.safetensors", Net, "bf16").reason == on_cpu.reason
    auto = conversion_report(convert(net, "auto"))
    assert auto is not None and auto.reason.startswith("auto: ")
    assert convert_file(src, tmp_path / "b.safetensors", Net, "auto").reason == auto.reason
