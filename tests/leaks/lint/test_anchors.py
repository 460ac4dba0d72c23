"""A fix anchors only on a tensor: ``--fix`` never writes ``out.new_tensor(...)`` or
``out.dtype`` where ``out`` is a dict, list, model output or module (it would compile and
then raise AttributeError when the model runs); such a finding is reported without a fix."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

from halfprec.leaks.lint import LintConfig, fix_source, lint_source
from halfprec.leaks.lint.anchors import not_tensors

UNSAFE = LintConfig(unsafe_fixes=True)

# compressai's point-cloud loss: ``output`` and ``target`` are dicts of tensors
_DICT = """\
import torch
from torch import nn


class Loss(nn.Module):
    def forward(self, output, target):
        device = target["pos"].device
        if "likelihoods" in output:
            rate = output["likelihoods"].sum()
        else:
            rate = torch.tensor([0.0], device=device)
        return {"loss": output["xyz_hat"].mean() + rate}
"""

# a feature pyramid handed a list of levels
_LIST = """\
import torch
from torch import nn


class Pyramid(nn.Module):
    def forward(self, feats):
        top = feats.pop()
        pad = torch.zeros(4)
        return [f + pad for f in feats] + [top]
"""

# a head over a backbone's output object (a ModelOutput / dataclass)
_OUTPUT = """\
import torch
from torch import nn


class Head(nn.Module):
    def forward(self, outputs):
        bias = torch.zeros(4)
        return outputs.logits + bias
"""

# a wrapper handed the module it runs
_MODULE = """\
import torch
from torch import nn


class Runner(nn.Module):
    def forward(self, block, scale):
        h = torch.ones(4)
        return block(scale) * h
"""


@dataclass
class _Out:
    logits: torch.Tensor


def _dict_args() -> tuple[Any, ...]:
    return ({"xyz_hat": torch.ones(2, 3)}, {"pos": torch.zeros(2, 3)})


_CASES = {
    "dict": (_DICT, "Loss", _dict_args),
    "list": (_LIST, "Pyramid", lambda: ([torch.ones(4), torch.ones(4)],)),
    "output": (_OUTPUT, "Head", lambda: (_Out(torch.ones(4)),)),
    "module": (_MODULE, "Runner", lambda: (nn.Identity(), torch.full((4,), 2.0))),
}


def _run(source: str, cls: str, args: tuple[Any, ...]) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<{cls}>", "exec"), namespace)
    return namespace[cls]()(*args)


@pytest.mark.parametrize("case", sorted(_CASES))
def test_no_fix_anchors_on_a_container_object_or_module(case: str) -> None:
    source, cls, args = _CASES[case]
    (finding,) = [f for f in lint_source(source, config=UNSAFE) if f.code == "HP101"]
    assert finding.fix is None, finding.fix  # reported, to fix by hand
    assert "floating tensor in scope" in finding.message
    fixed = fix_source(source, UNSAFE)
    assert fixed == source
    _run(fixed, cls, args())  # the file --fix leaves still runs


# the same loss once a real tensor is bound: the fix anchors on it, and is safe
_DICT_AND_TENSOR = """\
import torch
from torch import nn


class Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, output, target):
        h = self.proj(output["xyz_hat"])
        zero = torch.tensor([0.0], device=target["pos"].device)
        return {"loss": h.mean() + zero}
"""


def test_a_real_tensor_anchor_keeps_its_safe_fix() -> None:
    (finding,) = lint_source(_DICT_AND_TENSOR)
    assert finding.fix_safety == "safe"
    fixed = fix_source(_DICT_AND_TENSOR)
    assert 'zero = h.new_tensor([0.0], device=target["pos"].device)' in fixed
    torch.manual_seed(0)
    before = _run(_DICT_AND_TENSOR, "Loss", _dict_args())["loss"]
    torch.manual_seed(0)
    after = _run(fixed, "Loss", _dict_args())["loss"]
    assert torch.equal(before, after)


def test_forward_input_used_as_a_tensor_stays_an_anchor() -> None:
    source = _OUTPUT.replace("outputs.logits", "outputs.T")
    assert "outputs.new_zeros(4)" in fix_source(source)


def _names(body: str) -> frozenset[str]:
    return not_tensors(ast.parse(body))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('a = out["x"] + out[f"{k}_loss"]', {"out"}),
        ('if "k" not in batch: pass', {"batch"}),
        ("f(**kw)", {"f", "kw"}),
        ("xs.append(1); d.items(); s.add(2)", {"xs", "d", "s"}),
        ("y = o.last_hidden_state; cfg.hidden_size = 2", {"o", "cfg"}),
        ("y = layer(x)", {"layer"}),
        ("y = x.shape, x.dtype, x.T, x.data; z = x.view(2).new_zeros(1) + x[0] + x[i]", set()),
        ("y = self.proj(x); z = self.weight", set()),
    ],
)
def test_uses_that_show_a_name_is_no_tensor(body: str, expected: set[str]) -> None:
    assert _names(body) == expected
