"""The lint's data-flow model (issue 34): which values are floating tensors, and which fixes
that proves safe. The fixture block.py holds one module per source of that knowledge."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

from halfprec.leaks.lint import LintConfig, fix_source, lint_source
from support import FIXTURES

BLOCK = FIXTURES / "lint" / "block.py"

# the issue's own example, verbatim (below two lines that keep ruff off its layout)
ISSUE = (FIXTURES / "lint" / "issue34.py").read_text()


def test_tensors_shaped_from_a_submodule_output_are_found_and_fixed_safely() -> None:
    found = [(f.line, f.code, f.fix_safety) for f in lint_source(ISSUE)]
    assert (10, "HP101", "safe") in found and (11, "HP101", "safe") in found
    fixed = fix_source(ISSUE)  # no --unsafe-fixes
    assert "h = x.new_zeros(x.shape[0], x.shape[2])" in fixed
    assert "buf = x.new_ones(x.size(0), 1, x.size(2))" in fixed


def test_forward_first_input_is_a_proved_template() -> None:
    fixed = fix_source(ISSUE)
    assert "z = x.new_zeros(x.shape)" in fixed
    assert "m = x.new_full((x.shape[0], 16), -1e9)" in fixed  # HP301's fix stays opt-in
    left = [(f.line, f.code, f.fix_safety) for f in lint_source(fixed)]
    assert left == [(12, "HP101", "none"), (19, "HP301", "unsafe")]


@pytest.mark.parametrize(
    ("line", "template"),
    [
        ("a = torch.zeros(self.pos.shape)", "self.pos"),  # an nn.Parameter
        ("b = torch.ones(self.inv_freq.shape[0], 2)", "self.inv_freq"),  # a float buffer
        ("bias = torch.zeros(mask.shape)", "mask"),  # .to(hidden.dtype)
        ("picked = torch.zeros(experts.shape)", "h"),  # forward's input, not a helper's
    ],
)
def test_proved_templates_are_fixed_without_unsafe_fixes(line: str, template: str) -> None:
    fixed = fix_source(BLOCK.read_text())
    kind = line.split("torch.", 1)[1].split("(", 1)[0]
    assert line.replace(f"torch.{kind}", f"{template}.new_{kind}") in fixed


def test_integer_buffers_and_a_submodules_tuple_are_not_proved() -> None:
    source = BLOCK.read_text()
    safe = fix_source(source)
    assert "c = torch.zeros(self.steps.shape)" in safe  # integer buffer: no template
    assert "chosen = torch.zeros(experts.shape)" in safe  # guessed: needs --unsafe-fixes
    unsafe = fix_source(source, LintConfig(unsafe_fixes=True))
    assert "chosen = experts.new_zeros(experts.shape)" in unsafe


def _namespace(source: str) -> dict[str, object]:
    space: dict[str, object] = {}
    exec(compile(source, str(BLOCK), "exec"), space)
    return space


def _outputs(source: str) -> list[torch.Tensor]:
    space = _namespace(source)
    torch.manual_seed(1)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    h = torch.randn(2, 3, 4)
    calls = [("Block", ids), ("Plain", h), ("Buffers", ids), ("Optional_", ids), ("Router", h)]
    out = []
    for name, arg in calls:
        torch.manual_seed(0)
        model = space[name]()
        assert isinstance(model, nn.Module)
        with torch.no_grad():
            out.append(model.eval()(arg))
    return out


def test_safe_fixes_give_identical_fp32_outputs() -> None:
    source = BLOCK.read_text()
    fixed = fix_source(source)
    assert fixed != source
    for before, after in zip(_outputs(source), _outputs(fixed), strict=True):
        assert before.dtype == after.dtype == torch.float32
        assert torch.equal(before, after)


def test_optional_input_is_floating_after_its_none_test() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn
        class M(nn.Module):
            def forward(self, ids, inputs_embeds=None):
                pad = torch.zeros(3)  # no floating tensor yet: no finding
                if inputs_embeds is None:
                    inputs_embeds = self.embed(ids)
                return inputs_embeds + torch.zeros(inputs_embeds.shape[-1])
        """
    )
    (finding,) = lint_source(source)
    # proved on one way (a submodule), guessed from the name on the other: unsafe
    assert (finding.line, finding.fix_safety) == (8, "unsafe")
    assert "inputs_embeds.new_zeros(inputs_embeds.shape[-1])" in fix_source(
        source, LintConfig(unsafe_fixes=True)
    )


def test_factories_that_leave_the_model_at_once_are_not_findings() -> None:
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn
        class M(nn.Module):
            def forward(self, x):
                sizes = torch.ones(3).tolist()
                return x * sizes[0]
        """
    )
    assert lint_source(source) == []


def test_tables_made_fp32_on_purpose_and_default_masks_are_not_findings() -> None:
    """The two commonest false positives of a sample of transformers' HP101 findings
    (benchmarks/data/lint_sample.json): a sinusoid table built from `.float()` (fp32 in a
    half model too, cast by its caller) and a default attention mask (cast where used)."""
    source = textwrap.dedent(
        """\
        import math
        import torch
        from torch import nn
        def table(n):
            emb = torch.exp(torch.arange(n, dtype=torch.int64).float() * -math.log(1e4))
            return torch.cat([emb, torch.zeros(n)], dim=0)
        class M(nn.Module):
            def forward(self, x, attention_mask=None):
                if attention_mask is None:
                    attention_mask = torch.ones(x.shape[0], x.shape[1], device=x.device)
                return x + table(4).to(x.dtype) + torch.zeros(x.shape[-1])
        """
    )
    assert [(f.line, f.code) for f in lint_source(source)] == [(11, "HP101")]
