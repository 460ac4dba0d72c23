"""halfprec.audit: finds every marked leak of a suite with file and line; quiet on clean
and real code; restores torch's state and the training flags; leaves a stale cache visible."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.overrides import _get_current_function_mode_stack

from halfprec import Recipe, audit, convert
from support.cached import CachedProjection
from support.leaky import LEAKY, load_leaky, marked_leaks


def test_audit_finds_every_marked_leak_with_file_and_line() -> None:
    leaky = load_leaky()
    found: set[tuple[int, str]] = set()
    for name, (cls, make_inputs) in leaky.SUITE.items():
        torch.manual_seed(0)
        report = audit(cls(), make_inputs(), "fp16")
        assert report.leaks, f"{name}: no leak found"
        for leak in report.leaks:
            assert Path(leak.file).resolve() == LEAKY.resolve(), leak
            found.add((leak.line, leak.kind))
    assert found == marked_leaks()


def test_lint_finds_the_same_lines_statically_except_runtime_only_kinds() -> None:
    from halfprec.leaks.lint import lint_source

    # the audit counts every explicit upcast; the lint reports none that is cast back
    # before it meets half values (ExplicitLeak casts each back), see docs/leaks.md
    static = {line for line, kind in marked_leaks() if kind not in ("upcast", "mixed", "explicit")}
    found = {f.line for f in lint_source(LEAKY.read_text(), str(LEAKY))}
    assert found == static


def test_counts_and_repairs_report_each_leak_where_it_starts() -> None:
    leaky = load_leaky()
    report = audit(leaky.Nested(), torch.randn(2, 8), "fp16")
    factories = {line for line, kind in marked_leaks() if kind == "factory"}
    # three loop iterations; the repaired tensors cause no upcast or mixed reports downstream
    assert {(leak.line, leak.kind, leak.count) for leak in report.leaks} == {
        (line, "factory", 3) for line in factories
    }


def test_bf16_has_no_range_leak_but_same_factory_leak() -> None:
    leaky = load_leaky()
    cls, make_inputs = leaky.SUITE["RangeLeak"]
    assert audit(cls(), make_inputs(), "bf16").clean  # -1e9 fits bf16's range
    cls, make_inputs = leaky.SUITE["FactoryLeak"]
    report = audit(cls(), make_inputs(), "bf16")
    assert [(leak.kind, leak.op) for leak in report.leaks] == [("factory", "torch.zeros")]
    assert "bf16 model" in report.leaks[0].message


class _Clean(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)  # an fp32 island: its fp32 compute is not a leak

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.proj(x))
        h = h + h.new_zeros(h.shape) + torch.zeros_like(h)
        h = h.masked_fill(~mask, torch.finfo(h.dtype).min)
        return h.softmax(-1) * torch.arange(8, device=h.device)


def test_clean_module_and_converted_model_report_nothing() -> None:
    inputs = (torch.randn(2, 8), torch.eye(2, 8, dtype=torch.bool) | True)
    assert audit(_Clean(), inputs, "fp16").clean
    converted = convert(_Clean(), "bf16")  # already converted: audited as it is
    report = audit(converted, [inputs, inputs])
    assert report.clean and report.dtype == torch.bfloat16 and report.batches == 2


def test_mode_is_removed_after_audit_even_when_forward_raises() -> None:
    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("broken forward")

    with pytest.raises(ValueError, match="broken forward"):
        audit(Broken(), torch.randn(2), "fp16")
    assert len(_get_current_function_mode_stack()) == 0
    assert torch.zeros(2).dtype == torch.float32


@pytest.mark.slow
def test_transformers_bert_and_gpt2_small_configs_are_clean() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    ids = torch.randint(0, 500, (2, 12))
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0
    bert = transformers.BertModel(
        transformers.BertConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            vocab_size=500,
            attn_implementation="eager",
        )
    )
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            n_embd=32,
            n_layer=2,
            n_head=2,
            vocab_size=500,
            bos_token_id=0,
            eos_token_id=0,
            attn_implementation="eager",
        )
    )
    for model in (bert, gpt2):
        report = audit(model, {"input_ids": ids, "attention_mask": mask}, "fp16")
        assert report.clean, [leak.to_json() for leak in report.leaks]
        assert report.ops > 50


@pytest.mark.parametrize("name", ["t5", "llama"])
def test_stock_transformers_casting_integers_to_fp32_audit_clean(name: str) -> None:
    """Integer positions cast to fp32 (T5's relative buckets, Llama's rotary with autocast
    off) move no half value out of half: each comes back to integers or to the model's
    dtype, so an unmodified model audits clean."""
    pytest.importorskip("transformers")
    from testbed.hf_tiny import build

    model = build(name)
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids}
    if name == "t5":
        batch["decoder_input_ids"] = ids[:, :5]
    for dtype in ("fp16", "bf16"):
        report = audit(model, batch, dtype)
        assert report.clean, [leak.to_json() for leak in report.leaks]
        assert report.ops > 50


def test_a_cast_of_integers_is_no_leak_but_their_overflow_into_half_is() -> None:
    """``mask.float()`` moves no half value; ``(1 - m) * -1e9`` cast back into fp16 becomes
    -inf at that cast, a range leak on its line."""

    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            h = self.proj(x)
            m = mask.float()
            ok = h * m.to(h.dtype)
            return ok + ((1.0 - m) * -1e9).to(h.dtype)  # the overflow

    mask = torch.tensor([[1, 0] * 4] * 2)
    report = audit(Masked(), (torch.randn(2, 8), mask), "fp16")
    assert [(leak.kind, leak.op) for leak in report.leaks] == [("range", "Tensor.to")]
    assert "the overflow" in report.leaks[0].code and "become inf" in report.leaks[0].message
    assert audit(Masked(), (torch.randn(2, 8), mask), "bf16").clean  # -1e9 fits bf16


def test_audit_does_not_hide_a_stale_cache() -> None:
    """audit runs the model as given: no eval() call that would drop a stale fp32 cache."""
    torch.manual_seed(0)
    model = CachedProjection().eval()
    x = torch.randn(4, 8)
    # the op policy would cast the leak away
    half = convert(model, Recipe("fp16", fp32_ops=(), fp32_inputs=False))
    with torch.no_grad():
        half.cache["w"] = model.table.t().contiguous()  # stale fp32, as p.data casts left it
    report = audit(half, x)
    assert [leak.op for leak in report.leaks] == ["Tensor.matmul"]
    assert "w" in half.cache  # still there: audit changed nothing


def test_audit_leaves_the_training_flag_alone() -> None:
    half = convert(CachedProjection().train(), "fp16")
    audit(half, torch.randn(4, 8))
    assert half.training and half.norm.training


# -- issue 34: a leak that the recipe causes is labelled with its field, not blamed on code --
class _LearnedPositions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.pos = nn.Parameter(torch.randn(3, 8))  # small: the recipe keeps it fp32
        self.proj = nn.Linear(8, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(ids) + self.pos)


def test_an_upcast_on_a_parameter_the_recipe_keeps_fp32_names_the_recipe_field() -> None:
    torch.manual_seed(0)
    ids = torch.tensor([[1, 2, 3]])
    report = audit(_LearnedPositions(), ids, "fp16")
    [leak] = report.leaks
    assert (leak.kind, leak.recipe_field) == ("upcast", "fp32_params_up_to")
    assert "the small parameter `pos`" in leak.message
    assert "Recipe(fp32_params_up_to=0)" in leak.suggestion
    assert report.clean and report.problems == []
    assert report.to_json()["problems"] == 0
    # with the field off the parameter goes half: nothing to report at all
    assert audit(_LearnedPositions(), ids, Recipe(dtype="fp16", fp32_params_up_to=0)).leaks == []


def test_a_leak_that_the_code_causes_is_still_a_problem() -> None:
    class Scaled(_LearnedPositions):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.proj(self.embed(ids) * torch.ones(8))  # fp32 made by the code

    report = audit(Scaled(), torch.tensor([[1, 2, 3]]), "fp16")
    assert [leak.recipe_field for leak in report.problems] == [None]
    assert not report.clean


class _KeptParams(nn.Module):
    """Small parameters (kept fp32 by the recipe) used by the code directly: one through
    values computed from it alone, one as an einsum operand."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.gain = nn.Parameter(torch.zeros(8))
        self.kernel = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x) * (self.gain * 0.5).exp()  # computed from `gain` alone
        return torch.einsum("bi,io->bo", h, self.kernel)  # fails on half and fp32


def test_values_computed_from_a_kept_parameter_and_a_failing_op_name_the_recipe() -> None:
    report = audit(_KeptParams(), torch.randn(2, 8), "fp16")
    assert [(leak.kind, leak.recipe_field) for leak in report.leaks] == [
        ("upcast", "fp32_params_up_to"),
        ("mixed", "fp32_params_up_to"),
    ]
    assert "computed from the small parameter `gain`" in report.leaks[0].message
    assert "the small parameter `kernel`" in report.leaks[1].message
    assert report.clean
    assert audit(_KeptParams(), torch.randn(2, 8), Recipe("fp16", fp32_params_up_to=0)).leaks == []
