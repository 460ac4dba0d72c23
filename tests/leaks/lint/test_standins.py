"""Stand-ins: a default made fp32 for an omitted floating tensor argument (``if w is None:
w = torch.ones(n)``, ``w`` annotated ``Float[Tensor, "n"]``) is reported where it goes on
to code the lint cannot see into, as a half caller's tensor would. Each model here is
small and written for this test; the torch checks show what the model does in half."""

from __future__ import annotations

import re
import textwrap

import torch
from torch import nn

from support.lint_models import Snippets, model_class

HEAD = (
    "from typing import Optional\n\nimport torch\nfrom torch import nn\n"
    "from jaxtyping import Float\n\nfrom geometry.tree import Tree, build\n\n\n"
)
LINT = Snippets(HEAD)
_found = LINT.lines
RUN_HEAD = "import torch\nfrom torch import nn\n\n\n"

# the unseen helpers of the models below, as they would be written in their own file
HELPERS = """\
    class Tree:
        def __init__(self, total):
            self.total = total

        @staticmethod
        def from_points(points, areas):
            return Tree(torch.zeros(2, dtype=points.dtype).index_put((areas.long() * 0,), areas))


    def build(points, areas):
        return (points * areas[:, None]).sum(0)
    """

BUILT = """\
    class Field(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, points, areas: Float[torch.Tensor, " n"] | None = None):
            if areas is None:
                areas = torch.ones(points.shape[0], device=points.device)
            return build(self.proj(points), areas)
    """

CLASS_METHOD = """\
    class Field(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, *, points, areas: Optional[Float[torch.Tensor, " n"]] = None):
            if areas is None:
                areas = torch.ones(points.shape[0])
            tree = Tree.from_points(self.proj(points), areas=areas)
            return tree.total
    """

HANDED_ON = """\
    class Field(nn.Module):
        def __init__(self, d, store):
            super().__init__()
            self.proj = nn.Linear(d, d)
            self.store = store

        def forward(self, points, strengths: Float[torch.Tensor, " n"] | None = None):
            if strengths is None:
                strengths = torch.ones(points.shape[0], device=points.device)
            self.store.record(self.proj(points), strengths=strengths)
            return self.proj(points)
    """


def _run(body: str) -> nn.Module:
    plain = re.sub(r': (Optional\[)?Float\[torch.Tensor, " n"\]\]?( \| None)?', "", body)
    source = textwrap.dedent(HELPERS) + "\n\n" + textwrap.dedent(plain)
    return model_class(source, "Field", RUN_HEAD)(4).half()


def test_a_default_into_a_function_of_another_file_is_reported() -> None:
    points = torch.randn(3, 4).half()
    assert _run(BUILT)(points).dtype == torch.float32  # half * fp32 areas
    assert _found(BUILT) == [8]


def test_a_default_into_a_class_of_another_file_is_reported() -> None:
    try:  # half index_put of fp32 values raises
        _run(CLASS_METHOD)(points=torch.randn(3, 4).half())
    except RuntimeError as e:
        assert "Half" in str(e) or "Float" in str(e)
    else:
        raise AssertionError("expected a dtype mismatch")
    assert _found(CLASS_METHOD) == [8]


def test_a_default_into_an_object_method_is_reported() -> None:
    assert _found(HANDED_ON) == [9]


def test_a_default_with_the_input_dtype_stays_silent() -> None:
    typed = BUILT.replace("device=points.device)", "dtype=points.dtype)")
    assert _found(typed) == []


def test_an_unannotated_default_into_unseen_code_stays_silent() -> None:
    # a default mask handed to a mask builder of another file: the lint cannot tell that
    # it is floating, and mask builders cast what they take
    plain = BUILT.replace(': Float[torch.Tensor, " n"] | None = None', "=None")
    assert _found(plain) == []


def test_a_default_cast_before_it_goes_on_stays_silent() -> None:
    cast = BUILT.replace("build(self.proj(points), areas)", "build(points, areas.to(points.dtype))")
    assert _found(cast) == []
