"""convert/convert_: islands, boundaries, IO casting, and the classic half-precision hazards."""

from __future__ import annotations

import copy
import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from halfprec import HalfprecError, Recipe, convert, convert_, load, recipe_of, save
from halfprec.convert.core import conversion_report
from halfprec.dtypes import range_of

HALF = [torch.float16, torch.bfloat16]


class ZerosInForward(nn.Module):
    """The classic leak: torch.zeros(...) without dtype stays fp32 and meets a half Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        acc = torch.zeros(h.shape)  # fp32 whatever the model's dtype
        return self.out(acc + h)  # fp32 + half promotes to fp32


class PlainAttribute(nn.Module):
    """An fp32 tensor kept as a plain attribute: .half() does not see it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.offset = torch.linspace(-1, 1, 8)  # neither parameter nor buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x + self.offset)


class DictInputs(nn.Module):
    """Token ids and a mask in a dict next to float features."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        assert batch["ids"].dtype == torch.long, "token ids were cast"
        assert batch["mask"].dtype == torch.bool
        h = self.emb(batch["ids"]) + batch["features"]
        return {"h": self.proj(h).masked_fill(~batch["mask"][..., None], 0), "ids": batch["ids"]}


@dataclasses.dataclass
class Result:
    logits: torch.Tensor
    count: int


class DataclassOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> Result:
        return Result(self.head(x), 5)


def bn_model(running_var: float) -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).eval()
    m[1].running_var.fill_(running_var)
    return m


@pytest.mark.parametrize("dtype", HALF)
def test_zeros_made_in_forward_is_cast_at_the_half_linear(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = ZerosInForward().eval()
    x = torch.randn(3, 8)
    with pytest.raises(RuntimeError, match="same dtype|expected"):
        ZerosInForward().to(dtype)(x.to(dtype))  # the naive recipe crashes
    half = convert(model, dtype)
    y = half(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, model(x), atol=0.05, rtol=0.05)


@pytest.mark.parametrize("dtype", HALF)
def test_plain_tensor_attribute_is_cast(dtype: torch.dtype) -> None:
    model = PlainAttribute().eval()
    half = convert(model, dtype)
    assert half.offset.dtype == dtype
    assert model.offset.dtype == torch.float32  # the original is untouched
    report = conversion_report(half)
    assert report is not None and report.attributes_cast == ["offset"]
    x = torch.randn(2, 8)
    torch.testing.assert_close(half(x), model(x), atol=0.05, rtol=0.05)


def test_integer_and_bool_inputs_in_dicts_are_never_cast() -> None:
    torch.manual_seed(0)
    model = DictInputs().eval()
    batch = {
        "ids": torch.randint(0, 20, (2, 5)),
        "mask": torch.rand(2, 5) > 0.3,
        "features": torch.randn(2, 5, 8),
    }
    half = convert(model, "fp16")
    out = half(batch)
    assert out["ids"].dtype == torch.long and torch.equal(out["ids"], batch["ids"])
    assert out["h"].dtype == torch.float32
    torch.testing.assert_close(out["h"], model(batch)["h"], atol=0.02, rtol=0.02)


def test_dataclass_outputs_cast_back_and_keep_non_tensors() -> None:
    model = DataclassOut().eval()
    half = convert(model, "bf16")
    out = half(torch.randn(4, 8))
    assert isinstance(out, Result) and out.count == 5 and out.logits.dtype == torch.float32


def test_cast_outputs_false_keeps_half_end_to_end() -> None:
    half = convert(DataclassOut().eval(), Recipe(dtype="fp16", cast_outputs=False))
    assert half(torch.randn(4, 8)).logits.dtype == torch.float16


def test_batchnorm_running_var_beyond_fp16_never_becomes_inf() -> None:
    model = bn_model(1e5)  # > 65504
    naive = bn_model(1e5).half()
    assert torch.isinf(naive[1].running_var).all()
    # Even without the default norm islands, the out-of-range module stays fp32.
    half = convert(model, Recipe(dtype="fp16", norm_islands=False))
    report = conversion_report(half)
    assert report is not None
    assert half[1].running_var.dtype == torch.float32
    assert torch.isfinite(half[1].running_var).all()
    assert "running_var reaches 1e+05" in report.islands["1"]
    x = torch.randn(5, 4)
    out = half(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, model(x), atol=0.01, rtol=0.01)


@pytest.mark.parametrize("dtype", HALF)
def test_norms_are_fp32_islands_that_return_the_callers_dtype(dtype: torch.dtype) -> None:
    seen: list[torch.dtype] = []
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 8)).eval()
    half = convert(model, dtype)
    half[2].register_forward_pre_hook(lambda m, a: seen.append(a[0].dtype))
    assert half[1].weight.dtype == torch.float32
    assert half[0].weight.dtype == dtype and half[2].weight.dtype == dtype
    half(torch.randn(2, 8))
    assert seen == [dtype]  # the island handed its caller back the half dtype


class ScaleNorm(nn.Module):
    """A hand-written norm (not matched by name) that only works in fp32."""

    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(8))
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.dtype)
        return x * self.g / x.pow(2).mean(-1, keepdim=True).add(1e-12).sqrt()


def test_user_islands_by_name_type_and_filter_fn_receive_fp32() -> None:
    model = nn.Sequential(nn.Linear(8, 8), ScaleNorm(), nn.Linear(8, 8)).eval()
    for kwargs in (
        {"keep_fp32": ["1"]},
        {"keep_fp32": [ScaleNorm]},
        {"filter_fn": lambda m, n: isinstance(m, ScaleNorm)},
    ):
        half = convert(model, Recipe(dtype="fp16", **kwargs))  # type: ignore[arg-type]
        out = half(torch.randn(2, 8) * 300)  # x.pow(2) overflows fp16 (300^2*... fine in fp32)
        assert half[1].seen == [torch.float32]
        assert half[1].g.dtype == torch.float32
        assert torch.isfinite(out).all()
        report = conversion_report(half)
        assert report is not None and "1" in report.islands


def test_hand_written_norm_matched_by_class_name_is_an_island() -> None:
    class LlamaRMSNorm(ScaleNorm):
        pass

    half = convert(nn.Sequential(nn.Linear(8, 8), LlamaRMSNorm()).eval(), "fp16")
    assert half[1].g.dtype == torch.float32
    half(torch.randn(2, 8))
    assert half[1].seen == [torch.float32]


def test_unknown_keep_name_is_an_error_naming_the_fix() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(HalfprecError, match=r"keep_fp32 name 'encoder\.x' matches no module"):
        convert(model, Recipe(dtype="fp16", keep_fp32=("encoder.x",)))


def test_convert_copies_and_convert__mutates() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    half = convert(model, "bf16")
    assert model[0].weight.dtype == torch.float32 and half[0].weight.dtype == torch.bfloat16
    same = convert_(model, "bf16")
    assert same is model and model[0].weight.dtype == torch.bfloat16
    with pytest.raises(HalfprecError, match="already converted"):
        convert_(model, "fp16")


def test_auto_reports_a_reason_and_sizes_halve() -> None:
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))
    half = convert(model)  # dtype=None means auto
    report = conversion_report(half)
    assert report is not None and report.reason.startswith("auto:")
    assert report.bytes_after * 2 == report.bytes_before
    assert report.params_fp32 == 0 and report.fp32_share == 0.0


def test_tied_weights_stay_tied() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.emb(ids))

    half = convert(Tied().eval(), "fp16")
    assert half.head.weight is half.emb.weight and half.emb.weight.dtype == torch.float16
    assert half(torch.tensor([[1, 2]])).dtype == torch.float32


def test_recipe_file_drives_dtype_and_islands(tmp_path) -> None:  # type: ignore[no-untyped-def]
    Recipe(dtype=torch.float16, keep_fp32=("0",)).save(tmp_path / "p.json")
    half = convert(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), tmp_path / "p.json")
    assert half[0].weight.dtype == torch.float32 and half[1].weight.dtype == torch.float16


class _LayerNormInputs(TorchFunctionMode):
    """Records the input dtype of every F.layer_norm call."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.nn.functional.layer_norm:
            self.dtypes.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


def test_mixed_kernels_off_casts_norm_inputs_to_fp32_with_same_result() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 8)).eval()
    x = torch.randn(4, 8)
    outs = {}
    for mixed in (True, False):
        half = convert(model, Recipe(dtype="fp16", mixed_kernels=mixed))
        with _LayerNormInputs() as seen:
            outs[mixed] = half(x)
        assert seen.dtypes == ([torch.float16] if mixed else [torch.float32])
    # fp32 statistics either way: the fused mixed kernel and the cast island agree.
    torch.testing.assert_close(outs[True], outs[False], atol=2e-3, rtol=0)


class Widening(nn.Module):
    """A projection whose output (~1e5) is beyond fp16 and is the model's output."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.Linear(4, 4)
        self.big = nn.Linear(4, 4)
        with torch.no_grad():
            self.big.weight.fill_(1e5)
            self.big.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.big(self.small(x))
        self.seen = h.dtype  # what the island handed back to this (half) forward
        return h.relu() + 1


def test_island_keeps_an_output_beyond_fp16_in_fp32() -> None:
    torch.manual_seed(0)
    model = Widening().eval()
    x = torch.randn(3, 4)
    ref = model(x)
    assert float(ref.abs().max()) > 65504
    half = convert(model, Recipe(dtype="fp16", keep_fp32=("big",)))
    out = half(x)
    assert out.dtype == torch.float32 and bool(torch.isfinite(out).all())
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=1.0)
    assert half.seen == torch.float32
    half(x * 1e-6)  # an output in range goes back as the caller's fp16, as before
    assert half.seen == torch.float16
    bf16 = convert(model, Recipe(dtype="bf16", keep_fp32=("big",)))
    torch.testing.assert_close(bf16(x), ref, rtol=2e-2, atol=1e3)


def test_module_with_only_a_tied_parameter_still_guards_its_inputs() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(10, 8)
            self.head = nn.Linear(8, 10, bias=False)
            self.head.weight = self.embed.weight  # head's one parameter is embed's

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            stray = torch.zeros(ids.shape[0], 8)  # fp32, made in forward
            return self.head(self.embed(ids).mean(dim=1) + stray)

    torch.manual_seed(0)
    model = Tied().eval()
    ids = torch.randint(0, 10, (3, 4))
    out = convert(model, "fp16")(ids)  # fp32 + half -> fp32 meets the half head
    torch.testing.assert_close(out, model(ids), atol=2e-2, rtol=2e-2)


class LearnedScale(nn.Module):
    """A learned per-channel scale and a buffer of frequencies, used in elementwise math
    before a Linear: autocast keeps both fp32; so does convert, by default."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((8,), 1.0 + 2.0**-12))  # not a half value
        self.register_buffer("freqs", torch.pi * 2.0 ** torch.arange(8.0))
        self.big = nn.Parameter(torch.ones(300))  # more values than the limit below
        self.proj = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.sin(x * self.scale * self.get_buffer("freqs")) * self.big[:8])


@pytest.mark.parametrize("dtype", HALF)
def test_small_parameters_outside_gemms_stay_fp32_and_the_report_counts_them(
    dtype: torch.dtype,
) -> None:
    torch.manual_seed(0)
    model = LearnedScale().eval()
    half = convert(model, Recipe(dtype, fp32_params_up_to=256))
    assert half.scale.dtype == half.freqs.dtype == torch.float32  # as under autocast
    assert half.proj.weight.dtype == half.proj.bias.dtype == dtype  # a GEMM's: half
    assert half.big.dtype == dtype  # beyond the limit: half, for its memory
    report = conversion_report(half)
    assert report is not None and sorted(report.small_fp32) == ["freqs", "scale"]
    assert report.small_fp32_bytes == 16 * 4 and report.params_fp32 == 8
    assert "fp32 params <= 256" in str(half)
    x = 40 + torch.rand(4, 8)  # sin of x * freqs: fp32's result, the Linear in half
    out = half(x)
    with torch.autocast("cpu", dtype):
        expected = model(x)
    torch.testing.assert_close(out, expected.float(), rtol=0, atol=2 * range_of(dtype).eps)
    old = convert(model, Recipe(dtype, fp32_params_up_to=0))  # every parameter half
    assert old.scale.dtype == old.freqs.dtype == dtype
    assert conversion_report(old).small_fp32 == []  # type: ignore[union-attr]


def test_a_small_parameter_tied_to_a_gemm_goes_half_and_so_do_embedding_tables() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.gate = nn.Parameter(torch.ones(4))
            self.lin2 = nn.Linear(4, 4)
            self.lin2.weight = self.lin.weight
            self.types = nn.Embedding(2, 4)  # small, but a table: half

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin2(self.lin(x) * self.gate)

    half = convert(Tied().eval(), Recipe("fp16", fp32_params_up_to=100))
    assert half.lin.weight is half.lin2.weight and half.lin.weight.dtype == torch.float16
    assert half.gate.dtype == torch.float32
    assert half.types.weight.dtype == torch.float16
    assert half(torch.randn(2, 4)).dtype == torch.float32


def test_a_model_with_no_gemm_keeps_its_small_tables_fp32_and_its_large_ones_half() -> None:
    """Nothing computes faster in half without a GEMM: a small lookup table there is an
    ordinary small parameter (held-out poincare-boundary: rows near the unit sphere)."""

    class Distances(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.small = nn.Embedding(16, 4)
            self.large = nn.Embedding(64, 4)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return (self.small(ids) - self.large(ids)).pow(2).sum(-1)

    half = convert(Distances().eval(), Recipe("fp16", fp32_params_up_to=100))
    assert half.small.weight.dtype == torch.float32
    assert half.large.weight.dtype == torch.float16  # 256 values: over the limit
    report = conversion_report(half)
    assert report is not None and report.small_fp32 == ["small.weight"]
    assert half(torch.tensor([0, 3])).dtype == torch.float32


def test_a_weight_normed_convs_parametrization_goes_half_with_its_conv() -> None:
    # wav2vec2's positional conv: weight_norm keeps the weight's two factors in the conv's
    # ``parametrizations``, not on the conv itself; both are the GEMM's, so both go half
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 3, padding=1), dim=2)
    model = nn.Sequential(nn.Linear(4, 4), conv).eval()
    half = convert(model, Recipe("fp16", fp32_params_up_to=1000))
    factors = dict(half[1].parametrizations.weight.named_parameters())
    assert {n: t.dtype for n, t in factors.items()} == {
        "original0": torch.float16,
        "original1": torch.float16,
    }
    assert conversion_report(half).small_fp32 == []  # type: ignore[union-attr]


@pytest.mark.slow  # transformers' import: ~8 s here
def test_the_default_keeps_no_parameter_of_a_bert_fp32_outside_its_norms() -> None:
    """A BERT-style encoder (MiniLM's layout) has only Linear, Embedding and LayerNorm
    parameters: the default keeps nothing more fp32 than the norm islands."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    report = conversion_report(convert(model, "fp16"))
    assert report is not None and report.small_fp32 == []
    norms = sum(
        p.numel() for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()
    )
    assert report.params_fp32 == norms


def test_small_fp32_parameters_save_load_deepcopy_and_pickle_exactly(tmp_path: Path) -> None:
    torch.manual_seed(0)
    half = convert(LearnedScale().eval(), Recipe("fp16", fp32_params_up_to=256))
    loaded = load(save(half, tmp_path / "m.safetensors"), into=LearnedScale)
    buffer = io.BytesIO()
    torch.save(half, buffer)
    buffer.seek(0)
    pickled = torch.load(buffer, weights_only=False)
    x = 40 + torch.rand(4, 8)
    for other in (loaded, copy.deepcopy(half), pickled):
        assert recipe_of(other) == recipe_of(half)
        pairs = zip(half.state_dict().items(), other.state_dict().values(), strict=True)
        for (name, a), b in pairs:
            assert a.dtype == b.dtype and torch.equal(a, b), name
        assert torch.equal(other(x), half(x))


def test_norm_islands_false_still_makes_the_norms_half() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)).eval()
    half = convert(model, Recipe("fp16", norm_islands=False))
    assert half[1].weight.dtype == torch.float16
    assert conversion_report(half).small_fp32 == []  # type: ignore[union-attr]


# -- the conversion report, read back from the converted model ------------------------------
class Reported(nn.Module):
    """One of each thing the report counts: a norm island, a named island, a tied parameter,
    an integer buffer, a plain tensor attribute, a fill op (its forward names masked_fill)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.norm = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 8)
        self.keep = nn.Linear(8, 8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("steps", torch.arange(3))
        self.scale = torch.tensor(2.0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.keep(self.proj(self.norm(self.emb(ids)))) * self.scale
        return self.head(h.masked_fill(ids[..., None] == 0, -1e9))


def _numel(*modules: nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters(recurse=False))


@pytest.mark.parametrize("dtype", HALF)
def test_the_report_counts_parameters_bytes_and_every_boundary(dtype: torch.dtype) -> None:
    from halfprec.convert.op_islands import OpRef

    model = Reported().eval()
    ref = OpRef("proj", "relu", "m.py:1")
    recipe = Recipe(dtype=dtype, keep_fp32=("keep",), op_islands=(ref,))
    half = convert(model, recipe)
    report = conversion_report(half)
    assert report is not None
    assert (report.dtype, report.original_dtype) == (dtype, torch.float32)
    assert report.islands == {"norm": "norm island (LayerNorm)", "keep": "keep_fp32 name 'keep'"}
    assert report.keep_fp32 == ["norm", "keep"]
    assert report.attributes_cast == ["scale"]
    # every module that owns half parameters is guarded, the root too; islands are not
    assert report.guarded_modules == 3  # emb, proj, head
    assert report.fill_guards == [""] and report.op_islands == [ref]
    # the tied head weight counts once; the integer buffer is no parameter
    total = _numel(model.emb, model.norm, model.proj, model.keep)
    fp32 = _numel(model.norm, model.keep)
    assert (report.params_total, report.params_fp32) == (total, fp32)
    assert report.fp32_share == fp32 / total
    steps = model.steps.numel() * model.steps.element_size()
    assert report.bytes_before == 4 * total + steps
    assert report.bytes_after == dtype.itemsize * (total - fp32) + 4 * fp32 + steps
    assert report.to_json() == {
        "dtype": {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype],
        "reason": report.reason,
        "original_dtype": "fp32",
        "islands": report.islands,
        "attributes_cast": ["scale"],
        "guarded_modules": 3,
        "op_islands": [ref.to_json()],
        "fill_guards": [""],
        "fp32_ops": report.fp32_ops,
        "fp32_outputs": [],
        "notes": [],
        "params_total": total,
        "params_fp32": fp32,
        "fp32_share": fp32 / total,
        "bytes_before": report.bytes_before,
        "bytes_after": report.bytes_after,
        "small_fp32": [],
        "small_fp32_bytes": 0,
        "recipe": report.recipe.to_json(),
    }
    assert report.recipe.keep_fp32 == ("norm", "keep") and report.recipe.op_islands == (ref,)
    assert report.fp32_ops == sorted(recipe.fp32_ops)


def test_norms_are_default_islands_by_type_or_class_name_the_root_only_by_type() -> None:
    from halfprec.convert.kinds import is_default_island

    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.g = nn.Parameter(torch.ones(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.g

    class T5LayerNorm(Scale):
        pass

    class BigBatchNorm(nn.Linear):
        pass

    assert is_default_island(nn.LayerNorm(4)) and is_default_island(nn.LayerNorm(4), root=True)
    assert is_default_island(T5LayerNorm()) and not is_default_island(T5LayerNorm(), root=True)
    assert is_default_island(BigBatchNorm(2, 2))  # a submodule is judged by its name
    assert not is_default_island(Scale()) and not is_default_island(nn.Linear(2, 2))
    # a scripted module's class is RecursiveScriptModule: its original name decides
    assert is_default_island(torch.jit.script(T5LayerNorm()))
    assert not is_default_island(torch.jit.script(Scale()))
    # a model class whose name looks like a norm is not one whole fp32 island
    half = convert(nn.Sequential(BigBatchNorm(2, 2)), "fp16")
    assert half[0].weight.dtype == torch.float32
    root = BigBatchNorm(2, 2)
    assert convert(root, "fp16").weight.dtype == torch.float16


def test_add_note_records_in_the_report_and_refuses_an_unconverted_model() -> None:
    from halfprec.convert.core import add_note

    half = convert(nn.Sequential(nn.Linear(2, 2)), "fp16")
    assert add_note(add_note(half, "first"), "second") is half
    report = conversion_report(half)
    assert report is not None and report.notes == ["first", "second"]
    with pytest.raises(HalfprecError, match="^add_note needs a model converted by halfprec$"):
        add_note(nn.Linear(2, 2), "x")


# -- which modules become islands, and why ---------------------------------------------------
def _islands(model: nn.Module, recipe: Recipe | str) -> dict[str, str]:
    report = conversion_report(convert(model, recipe))
    assert report is not None
    return report.islands


def test_keep_fp32_names_match_globs_the_root_and_filter_fn_say_why() -> None:
    model = nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), nn.Linear(2, 2))
    glob = _islands(model, Recipe(dtype="fp16", keep_fp32=("0.*",)))
    assert glob == {"0.0": "keep_fp32 name '0.*'", "0.1": "keep_fp32 name '0.*'"}
    whole = convert(model, Recipe(dtype="fp16", keep_fp32=("",)))
    assert conversion_report(whole).islands == {"": "the whole model"}  # type: ignore[union-attr]
    assert {p.dtype for p in whole.parameters()} == {torch.float32}
    x = torch.randn(3, 2)
    assert torch.equal(whole(x), model(x))  # an fp32 model takes its input uncast
    picked = _islands(model, Recipe(dtype="fp16", filter_fn=lambda m, n: n == "1"))
    assert picked == {"1": "filter_fn"}


class OutOfRange(nn.Module):
    """Tensors that are (or are not) beyond fp16: an integer buffer of large ids first, an
    fp16 maximum, and a one-element plain attribute beyond it."""

    def __init__(self, limit: float) -> None:
        super().__init__()
        self.register_buffer("ids", torch.tensor([100_000, 7]))
        self.top = nn.Parameter(torch.tensor([65504.0, 1.0]))
        self.limit = torch.tensor(limit)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.top + self.limit


def test_a_tensor_beyond_the_half_range_makes_its_module_an_island() -> None:
    model = nn.Sequential(OutOfRange(1e6), OutOfRange(2.0))
    every_half = Recipe("fp16", fp32_params_up_to=0)  # small tensors too: as .half() has them
    islands = _islands(model, every_half)
    # integer values and the dtype's own maximum are in range; the 1-element attribute is not
    assert islands == {"0": "limit reaches 1e+06, beyond fp16 max 65504"}
    half = convert(model, every_half)
    assert half[1].top.dtype == torch.float16 and half[1].ids.dtype == torch.long
    assert half[0].top.dtype == torch.float32 and half[0].limit.dtype == torch.float32
    assert _islands(model, every_half.replace(dtype="bf16")) == {}
    # by default the small parameter stays fp32 without an island; the plain attribute
    # is cast with the model all the same, so its module is still an island
    by_default = convert(model, "fp16")
    assert _islands(model, "fp16") == islands and by_default[1].top.dtype == torch.float32


class TiedHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.mid = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10)
        self.head.weight = self.emb.weight  # head: the tied weight first, then its bias

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.mid(self.emb(ids)))


def test_a_parameter_tied_to_an_island_keeps_every_module_using_it_in_fp32() -> None:
    model = TiedHead().eval()
    assert _islands(model, Recipe(dtype="fp16", keep_fp32=("emb",))) == {
        "emb": "keep_fp32 name 'emb'",
        "head": "shares a parameter with an fp32 island",
    }
    report = conversion_report(convert(model, "fp16"))
    assert report is not None  # the tied weight counts once, the bias after it too
    assert report.params_total == _numel(model.emb, model.mid) + model.head.bias.numel()
    assert report.bytes_before == 4 * report.params_total
    both = convert(model, Recipe(dtype="fp16", keep_fp32=("emb", "head")))
    assert both.head.weight is both.emb.weight
    assert both.head.bias.dtype == torch.float32  # the parameter after the tied one
    assert both.mid.weight.dtype == torch.float16


# -- casting ----------------------------------------------------------------------------------
class Attributes(nn.Module):
    """Tensors outside parameters and buffers: plain, dunder-named, and in dicts."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(2, 2)
        self.offset = torch.ones(2)
        self.__dict__["__saved__"] = torch.ones(2)  # dunder names are Python's, not state
        self.cache = {"w": torch.ones(2), "ids": torch.arange(2), "name": "x"}
        self.ints = {"ids": torch.arange(2)}
        self.words = {"a": "b"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + self.offset


def test_plain_and_dict_tensor_attributes_are_cast_floating_ones_only() -> None:
    model = nn.Sequential(Attributes())
    half = convert(model, "fp16")
    report = conversion_report(half)
    assert report is not None and report.attributes_cast == ["0.offset", "0.cache"]
    inner = half[0]
    assert inner.offset.dtype == torch.float16
    assert inner.__dict__["__saved__"].dtype == torch.float32
    assert inner.cache["w"].dtype == torch.float16 and inner.cache["ids"].dtype == torch.long
    assert inner.cache["name"] == "x" and inner.ints["ids"].dtype == torch.long


def test_an_island_keeps_its_gradients_in_fp32_and_its_weights_in_memory_of_their_own() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    shared = torch.ones(1000)  # the norm's weight views a larger storage, as a memory map
    model[1].weight = nn.Parameter(shared[:4])
    model(torch.randn(2, 4)).sum().backward()
    half = convert_(model, "fp16")
    assert half[1].weight.grad.dtype == torch.float32  # type: ignore[union-attr]
    assert half[0].weight.grad.dtype == torch.float16  # type: ignore[union-attr]
    assert half[1].weight.untyped_storage().nbytes() == 4 * 4


class IntParameter(nn.Module):
    """A module whose only parameter is an integer one (a lookup table)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.arange(4), requires_grad=False)
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


def test_guards_go_on_half_modules_with_floating_parameters_only() -> None:
    only_int = nn.Module()
    only_int.register_parameter("table", nn.Parameter(torch.arange(4), requires_grad=False))
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), only_int, nn.LayerNorm(4), IntParameter())
    every_half = Recipe(dtype="fp16", fp32_params_up_to=0)  # IntParameter's w too
    report = conversion_report(convert(model, every_half))
    assert report is not None and report.guarded_modules == 2  # the Linear, IntParameter
    root = conversion_report(convert(nn.Linear(4, 4), "fp16"))
    assert root is not None and root.guarded_modules == 0  # the root casts its own inputs
    off = conversion_report(convert(model, Recipe(dtype="fp16", guard_boundaries=False)))
    assert off is not None and off.guarded_modules == 0
    kept = convert(model, Recipe(dtype="fp16", keep_fp32=("4",)))
    assert kept[4].w.dtype == torch.float32  # the float parameter after the integer one


# -- the recipe as applied, and the root ---------------------------------------------------------
def test_the_resolved_recipe_names_every_island_and_a_concrete_dtype() -> None:
    from halfprec.convert.core import recipe_of
    from halfprec.convert.op_islands import OpRef

    model = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2), nn.Linear(2, 2))
    kept, half_op = OpRef("0", "relu", "m.py:1"), OpRef("2", "relu", "m.py:1")
    recipe = Recipe(filter_fn=lambda m, n: n == "0", op_islands=(kept, half_op))
    resolved = recipe_of(convert(model, recipe))
    assert resolved is not None
    assert resolved.dtype in (torch.float16, torch.bfloat16)  # "auto", resolved
    assert resolved.keep_fp32 == ("0", "1") and resolved.norm_islands is False
    assert resolved.filter_fn is None
    assert resolved.op_islands == (half_op,)  # an island computes all its ops in fp32
    assert recipe_of(nn.Linear(2, 2)) is None


class RootSeesInputs(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.dtype)
        return self.inner(x)


def test_fp32_inputs_reach_the_root_in_fp32_unless_torchscript_is_inside() -> None:
    x = torch.randn(2, 4)
    for fp32_inputs, want in ((True, torch.float32), (False, torch.float16)):
        half = convert(RootSeesInputs(nn.Linear(4, 4)), Recipe("fp16", fp32_inputs=fp32_inputs))
        half(x)
        assert half.seen == [want]
    # TorchScript code casts nothing, so its inputs arrive half whatever the recipe says
    model = RootSeesInputs(nn.Sequential(torch.jit.script(nn.Linear(4, 4)), nn.Linear(4, 4)))
    half = convert(model, Recipe("fp16", fp32_inputs=True))
    torch.testing.assert_close(half(x), model(x), atol=2e-2, rtol=2e-2)
    assert half.seen == [torch.float16]
    report = conversion_report(half)
    assert report is not None and report.guarded_modules == 1  # the Python Linear after it


def test_a_norm_island_inside_torchscript_is_reported_as_an_island() -> None:
    traced = torch.jit.trace(
        nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8)).eval(), torch.ones(2, 4)
    )
    half = convert(RootSeesInputs(traced), "bf16")
    report = conversion_report(half)
    assert report is not None and half.state_dict()["inner.1.weight"].dtype == torch.float32
    assert list(report.islands) == ["inner.1"] and "TorchScript" in report.islands["inner.1"]
    assert report.small_fp32 == [] and report.params_fp32 == 16  # not Recipe.fp32_params_up_to


# -- errors, each naming the fix -----------------------------------------------------------------
def test_convert_refuses_what_it_cannot_convert_and_says_what_to_do() -> None:
    with pytest.raises(TypeError, match="^convert expects an nn.Module, got str$"):
        convert_("model", "fp16")  # type: ignore[arg-type]
    half = convert(nn.Linear(2, 2), "fp16")
    with pytest.raises(HalfprecError) as already:
        convert_(half, "fp16")
    assert str(already.value) == (
        "this model was already converted by halfprec; convert the original fp32 model"
    )
    with pytest.raises(HalfprecError) as scripted:
        convert(torch.jit.script(nn.Linear(2, 2)), "fp16")
    assert str(scripted.value) == (
        "a TorchScript module cannot carry halfprec's boundaries; convert the Python model, "
        "or wrap the scripted one in an nn.Module"
    )


def test_an_unknown_keep_name_lists_up_to_three_similar_names() -> None:
    from collections import OrderedDict

    layers = OrderedDict((n, nn.Linear(2, 2)) for n in ("x1", "x2", "y", "x3", "x4"))
    model = nn.Sequential(layers)
    with pytest.raises(HalfprecError) as similar:
        convert(model, Recipe(dtype="fp16", keep_fp32=("enc.x",)))
    assert str(similar.value) == (
        "keep_fp32 name 'enc.x' matches no module of Sequential (similar: x1, x2, x3); "
        "list names with model.named_modules()"
    )
    with pytest.raises(HalfprecError) as none:
        convert(model, Recipe(dtype="fp16", keep_fp32=("z",)))
    assert str(none.value) == (
        "keep_fp32 name 'z' matches no module of Sequential; list names with model.named_modules()"
    )


def test_an_island_s_children_are_skipped_and_the_modules_after_it_still_picked() -> None:
    model = nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)), nn.LayerNorm(2))
    assert _islands(model, Recipe(dtype="fp16", keep_fp32=("0",))) == {
        "0": "keep_fp32 name '0'",
        "1": "norm island (LayerNorm)",
    }


class ExpLast(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)  # <- op island


class SeesInner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = ExpLast()
        self.proj = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inner(self.proj(x))
        self.seen = h.dtype
        return h


def _exp_ref(module: str) -> Any:
    import inspect
    import os

    from halfprec.convert.op_islands import OpRef

    lines, start = inspect.getsourcelines(ExpLast)
    n = next(i for i, line in enumerate(lines) if "# <- op island" in line)
    return OpRef(module, "exp", f"{os.path.basename(__file__)}:{start + n}")


def test_op_islands_hand_their_caller_half_and_name_a_module_or_fail() -> None:
    half = convert(SeesInner().eval(), Recipe(dtype="fp16", op_islands=(_exp_ref("inner"),)))
    report = conversion_report(half)
    assert report is not None and report.op_islands == [_exp_ref("inner")]
    half(torch.randn(3, 2))
    assert half.seen == torch.float16  # computed in fp32, handed back in the caller's dtype
    ghost = _exp_ref("nope")
    with pytest.raises(HalfprecError) as error:
        convert(SeesInner(), Recipe(dtype="fp16", op_islands=(ghost,)))
    assert str(error.value) == (
        f"op island {ghost} names no module of SeesInner; the recipe was tuned on another "
        "model: re-run `halfprec tune`"
    )
    # TorchScript code cannot run an op island: the recipe as applied leaves it out
    scripted = SeesInner()
    scripted.inner = torch.jit.script(ExpLast())
    applied = conversion_report(convert(scripted, Recipe("fp16", op_islands=(_exp_ref("inner"),))))
    assert applied is not None and applied.op_islands == [] and applied.recipe.op_islands == ()
