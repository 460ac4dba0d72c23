"""halfprec.ops: the one table of fills and factories that preflight, audit and lint share."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from halfprec import audit, ops
from halfprec.leaks.lint import lint_source
from halfprec.preflight import preflight

SOURCE = """\
import torch
from torch import nn


class Clean(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).nan_to_num(0.0, 1e9)
"""


def _model() -> nn.Module:
    namespace: dict[str, object] = {}
    exec(compile(SOURCE, "<ops-test>", "exec"), namespace)
    model = namespace["Clean"]()
    assert isinstance(model, nn.Module)
    return model


def _found(model: nn.Module, x: torch.Tensor) -> dict[str, bool]:
    """Whether preflight, audit and lint each report the 1e9 passed to nan_to_num."""
    return {
        "preflight": any(f.kind == "fill" for f in preflight(model, x, "fp16").findings),
        "audit": any(
            leak.kind == "range" and leak.op == "Tensor.nan_to_num"
            for leak in audit(model, x, "fp16").leaks
        ),
        "lint": any(f.code == "HP301" for f in lint_source(SOURCE)),
    }


def test_a_fill_added_to_the_table_is_found_by_preflight_audit_and_lint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, x = _model(), torch.randn(2, 4)
    assert "nan_to_num" not in ops.FILL_OPS
    assert _found(model, x) == {"preflight": False, "audit": False, "lint": False}
    monkeypatch.setattr(ops, "FILL_OPS", ops.FILL_OPS | {"nan_to_num"})
    assert _found(model, x) == {"preflight": True, "audit": True, "lint": True}


def test_names_match_bare_or_qualified() -> None:
    assert ops.is_fill("masked_fill") and ops.is_fill("Tensor.masked_fill")
    assert ops.is_fill("torch.full") and not ops.is_fill("torch.matmul")
    assert ops.is_factory("torch.zeros") and not ops.is_factory("Tensor.masked_fill")
    assert ops.bare("torch.nn.functional.pad") == "pad"
