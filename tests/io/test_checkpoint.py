from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from torch import nn

from halfprec import CheckpointError, convert
from halfprec.convert import Recipe, recipe_of
from halfprec.convert.core import conversion_report
from halfprec.io.checkpoint import load, read_metadata, save


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 8)).eval()


def test_roundtrip_is_half_size_with_metadata(tmp_path: Path) -> None:
    model = net()
    half = convert(model, "fp16")
    path = save(half, tmp_path / "m.safetensors")
    fp32_size = sum(p.numel() * 4 for p in model.parameters())
    header = 8 + int.from_bytes(path.read_bytes()[:8], "little")  # safetensors' JSON header
    assert path.stat().st_size - header < 0.55 * fp32_size
    meta = read_metadata(path)
    assert Recipe.loads(meta["recipe"]) == recipe_of(half)  # the whole recipe travels
    assert meta["dtype"] == "fp16" and meta["torch_version"] == torch.__version__
    assert json.loads(meta["keep_fp32"]) == ["1"]
    assert "halfprec_version" in meta

    fresh = net()
    for p in fresh.parameters():
        nn.init.zeros_(p)
    loaded = load(path, into=fresh)
    report = conversion_report(loaded)
    assert report is not None and report.dtype == torch.float16
    assert loaded[0].weight.dtype == torch.float16 and loaded[1].weight.dtype == torch.float32
    x = torch.randn(3, 64)
    assert torch.equal(loaded(x), half(x))


def test_mismatch_names_the_first_problems(tmp_path: Path) -> None:
    path = save(convert(net(), "fp16"), tmp_path / "m.safetensors")
    other = nn.Sequential(nn.Linear(64, 32), nn.LayerNorm(32), nn.Linear(32, 8), nn.ReLU())
    with pytest.raises(CheckpointError, match=r"does not match Sequential: .*shape 0\.weight"):
        load(path, into=other)


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    path = save(convert(net(), "fp16"), tmp_path / "m.safetensors")
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load(path, into=net())


class Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned",))


def test_pickled_checkpoint_with_code_is_refused_and_plain_state_dict_loads(tmp_path: Path) -> None:
    evil = tmp_path / "evil.bin"
    evil.write_bytes(pickle.dumps({"0.weight": Evil()}))
    with pytest.raises(CheckpointError, match="refusing to unpickle"):
        load(evil, into=net())
    plain = tmp_path / "plain.pt"
    torch.save(net().state_dict(), plain)
    fresh = net()
    nn.init.zeros_(fresh[0].weight)
    load(plain, into=fresh)
    assert torch.equal(fresh[0].weight, net()[0].weight)


def test_failed_write_keeps_the_old_file_and_leaves_no_partial(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = save(convert(net(), "fp16"), tmp_path / "m.safetensors")
    before = path.read_bytes()

    def crash(tensors: dict[str, torch.Tensor], metadata: object = None) -> bytes:
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save(convert(net(), "bf16"), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def test_tied_weights_are_saved_once(tmp_path: Path) -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

    path = save(convert(Tied(), "fp16"), tmp_path / "t.safetensors")
    fresh = Tied()
    load(path, into=fresh)
    assert fresh.head.weight is fresh.emb.weight


@pytest.mark.parametrize("writer", ["convert", "train"])
def test_checkpoint_writes_keep_links_and_modes_and_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    from halfprec.train import save_checkpoint

    def write(path: Path) -> None:
        if writer == "convert":
            save(convert(net(), "fp16"), path)
        else:
            model = net()
            save_checkpoint(path, model, torch.optim.SGD(model.parameters(), lr=0.1))

    (tmp_path / "runs").mkdir()
    real = tmp_path / "runs" / "ckpt.safetensors"
    write(real)
    real.chmod(0o600)
    link = tmp_path / "latest.safetensors"
    link.symlink_to(real)
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    write(link)
    assert link.is_symlink() and Path(os.readlink(link)) == real
    assert real.stat().st_mode & 0o777 == 0o600
    assert safetensors.torch.load_file(str(link))  # the new file, complete
    assert len(synced) == 2 and ".halfprec-" in synced[0]  # the temp file, then its folder
    assert Path(synced[0]).parent == real.parent and synced[1] == str(real.parent)


def test_integer_tensor_into_a_float_parameter_is_refused(tmp_path: Path) -> None:
    state = {k: v.clone() for k, v in net().state_dict().items()}
    first = next(iter(state))
    state[first] = state[first].to(torch.int32)
    safetensors.torch.save_file(state, str(tmp_path / "ints.safetensors"))
    model = net()
    before = model.state_dict()[first].clone()
    with pytest.raises(CheckpointError, match=rf"dtype kind {first} is int32"):
        load(tmp_path / "ints.safetensors", into=model)
    assert torch.equal(model.state_dict()[first], before)


def test_metadata_that_contradicts_the_tensors_is_refused(tmp_path: Path) -> None:
    path = save(convert(net(), "fp16"), tmp_path / "m.safetensors")
    tensors = safetensors.torch.load_file(str(path))
    forged = {
        k: v.to(torch.bfloat16) if v.dtype == torch.float16 else v for k, v in tensors.items()
    }
    safetensors.torch.save_file(forged, str(path), metadata=read_metadata(path))
    with pytest.raises(
        CheckpointError,
        match=r"tensor .* is stored as bf16 but the recipe in its metadata makes it fp16",
    ):
        load(path, into=net())


def test_a_mismatch_lists_three_names_of_each_kind_then_an_ellipsis(tmp_path: Path) -> None:
    """Found by the mutation pass: the message's lists and their cut were never checked."""

    def stack(n: int, last: int = 2) -> nn.Module:
        return nn.Sequential(*[nn.Linear(2, 2) for _ in range(n - 1)], nn.Linear(2, last))

    wide = save(stack(5), tmp_path / "wide.safetensors")  # unconverted: a plain state dict
    with pytest.raises(CheckpointError) as err:
        load(wide, into=stack(3, last=3))
    assert str(err.value) == (
        f"{wide} does not match Sequential: unexpected 3.bias, 3.weight, 4.bias ... | shape "
        "2.weight (2, 2) vs model (3, 2); 2.bias (2,) vs model (3,); load it into the same "
        "architecture it was saved from"
    )
    with pytest.raises(
        CheckpointError,
        match=r"missing 3\.weight, 3\.bias, 4\.weight \.\.\. ;|"
        r"missing 3\.weight, 3\.bias, 4\.weight \.\.\.;",
    ):
        load(save(stack(3), tmp_path / "three.safetensors"), into=stack(5))
    with pytest.raises(CheckpointError) as short:
        load(save(stack(4), tmp_path / "four.safetensors"), into=stack(3))
    assert "unexpected 3.bias, 3.weight;" in str(short.value)  # two names: no ellipsis


def test_save_refuses_a_module_without_tensors(tmp_path: Path) -> None:
    out = tmp_path / "empty.safetensors"
    with pytest.raises(CheckpointError, match="GELU holds no tensors"):
        save(nn.GELU(), out)
    assert not out.exists()


def test_a_parametrized_model_saves_and_loads_bit_exactly(tmp_path: Path) -> None:
    # weight_norm keeps original0/original1 in the state dict; the half model's file
    # loads back into a fresh parametrized model tensor for tensor
    from torch.nn.utils import parametrizations

    import halfprec

    def build() -> nn.Module:
        torch.manual_seed(0)
        conv = parametrizations.weight_norm(nn.Conv1d(4, 4, 3, padding=1), dim=2)
        return nn.Sequential(conv, nn.GELU(), nn.Conv1d(4, 4, 1)).eval()

    half = halfprec.convert(build(), "fp16")
    halfprec.save(half, tmp_path / "m.safetensors")
    back = halfprec.load(tmp_path / "m.safetensors", into=build)
    for (name, a), b in zip(half.state_dict().items(), back.state_dict().values(), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    x = torch.randn(2, 4, 8)
    with torch.no_grad():
        assert torch.equal(back(x), half(x))


@pytest.mark.slow
def test_load_into_a_builder_that_calls_from_pretrained(tmp_path: Path) -> None:
    """A builder that calls transformers' from_pretrained (README's form) cannot run on the
    meta device: load builds it for real instead, and says so."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    transformers.BertModel(config).eval().save_pretrained(tmp_path / "fp32")

    def build() -> nn.Module:
        return transformers.AutoModel.from_pretrained(tmp_path / "fp32").eval()

    half = convert(build(), "bf16")
    save(half, tmp_path / "half.safetensors")
    fresh = load(tmp_path / "half.safetensors", into=build)
    want = half.state_dict()
    assert all(torch.equal(t, want[k]) for k, t in fresh.state_dict().items())


def test_a_compiled_model_is_saved_as_the_module_it_compiled(tmp_path: Path) -> None:
    half = convert(net(), "bf16")
    out = save(torch.compile(half), tmp_path / "compiled.safetensors")
    assert read_metadata(out)["dtype"] == "bf16"  # its recipe, not "unconverted"
    back = load(out, into=net)
    for name, want in half.state_dict().items():
        assert torch.equal(back.state_dict()[name], want), name


class _ExtraState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)
        self.scale = 5.0

    def get_extra_state(self) -> dict[str, float]:
        return {"scale": self.scale}

    def set_extra_state(self, state: dict[str, float]) -> None:
        self.scale = state["scale"]


def _sparse() -> nn.Module:
    model = net()
    model.register_buffer("mask", torch.eye(4).to_sparse())
    return model


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (_ExtraState, "'_extra_state' is a dict, not a tensor"),
        (_sparse, r"'mask' is torch.sparse_coo.*\.to_dense\(\)"),
        (lambda: net().to("meta"), "'0.weight' is on the meta device"),
    ],
)
def test_state_a_safetensors_file_cannot_hold_is_refused_by_name(
    tmp_path: Path, build: Any, needle: str
) -> None:
    out = tmp_path / "m.safetensors"
    with pytest.raises(CheckpointError, match=needle):
        save(build(), out)
    assert list(tmp_path.iterdir()) == []


def test_an_object_that_is_no_module_is_refused_naming_its_model(tmp_path: Path) -> None:
    class Result:  # what halfprec.deploy returns: the module is its .model
        model = net()

    with pytest.raises(CheckpointError, match="takes an nn.Module; got Result: pass its .model"):
        save(Result(), tmp_path / "m.safetensors")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_load_a_hf_folder_into_a_builder_that_calls_from_pretrained(tmp_path: Path) -> None:
    """The same builder for a folder ``convert -o DIR`` wrote: built for real, the folder's
    half model comes back, islands and all."""
    pytest.importorskip("transformers")
    from halfprec.io.hf_convert import convert_directory
    from support.hf_models import build as build_tiny
    from support.hf_models import save as save_hf

    source = save_hf("gpt2", tmp_path)
    out = tmp_path / "half"
    convert_directory(source, out, Recipe("bf16"))

    def build() -> nn.Module:
        import transformers

        return transformers.AutoModelForCausalLM.from_pretrained(source).eval()

    fresh = load(out, into=build)
    want = load(out, into=lambda: build_tiny("gpt2"))
    assert fresh.state_dict().keys() == want.state_dict().keys()
    assert all(torch.equal(t, want.state_dict()[k]) for k, t in fresh.state_dict().items())
    assert {t.dtype for t in fresh.state_dict().values()} >= {torch.bfloat16}
