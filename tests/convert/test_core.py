"""convert/convert_: islands, boundaries, IO casting, and the classic half-precision hazards."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from halfprec import HalfprecError, Recipe, convert, convert_
from halfprec.convert.core import conversion_report

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
        "notes": [],
        "params_total": total,
        "params_fp32": fp32,
        "fp32_share": fp32 / total,
        "bytes_before": report.bytes_before,
        "bytes_after": report.bytes_after,
        "recipe": report.recipe.to_json(),
    }
    assert report.recipe.keep_fp32 == ("norm", "keep") and report.recipe.op_islands == (ref,)
    assert report.fp32_ops == sorted(recipe.fp32_ops)
